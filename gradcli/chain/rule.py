"""`chain_rule`: the composition (compose.py) beside torch's graph and flow, as plain data.

Each operation's output tensor has a `grad_fn`: that graph node carries the operation's
formulas. Its edges are paired with the operation's inputs in order (torch lists
`next_functions` in the order of the operation's differentiable arguments); an edge that
leads elsewhere runs through nodes torch added inside the operation (`2/x` is a
ReciprocalBackward0 under a MulBackward0), named as `inner`.
"""

from __future__ import annotations

from typing import Any

from ..graph.walk import ACCUMULATE_GRAD, Graph
from ..exact.plan import make_plan
from . import numbers, proof
from .compose import Composition, Step, compose
from .forms import formula, text_of, total
from .leaves import leaf_gradients
from ..interpret.applications import Application
from .result import ChainRule, Definition, Edge, Formula, Node, Numbers

#: Most variable elements given one symbol each (softmax, matmul, a reduction over a dim).
ELEMENTS_MAX = 32
#: Most graph nodes written out: about 1 ms a node, so at most ~10 s of formulas.
NODES_MAX = 10_000


def chain_rule(
    prepared: Any, applications: list[Application], bindings: list[tuple[str, Any]], graph: Graph,
    flow: list[Any] | None, output: Any, grad_output: str | None, seconds: dict[str, Any] | None = None,
    live: dict[str, Any] | None = None, gradient_ids: dict[str, dict[int, str]] | None = None,
) -> ChainRule:
    """The chain rule of a traced program: `applications` as recorded while building it,
    `bindings` its assigned names, `flow` the first pass's hook records (plain steps),
    `seconds` the second derivatives --create-graph took, by variable, `live` the gradients
    --create-graph left with their own graphs (written out by second.py), `gradient_ids` the
    node ids trace gave those graphs' nodes."""
    import numpy as np
    import sympy as sp

    from ..errors import LimitError, UsageError

    if len(graph.nodes) > NODES_MAX:
        raise LimitError(
            f"--symbolic writes formulas for at most {NODES_MAX:,} graph nodes; this graph has {len(graph.nodes):,}",
            hint="trace it without --symbolic, or a shorter program",
        )
    from ..language.derivatives import LOCALS
    from ..language.ops import OPS

    losses = sorted({a.name for a in applications if a.name in OPS and OPS[a.name].kind == "loss"})
    if losses:  # a loss couples scores and integer labels: no one-op-deep formula row yet
        raise UsageError(
            f"--symbolic has no local-derivative rows for the loss functions ({', '.join(losses)})",
            hint="write the loss out in the language, e.g. ((out - y)**2).mean() for mse_loss",
        )
    missing = sorted({a.name for a in applications if a.name in OPS and a.name not in LOCALS})
    if missing:
        raise UsageError(f"--symbolic has no local-derivative row for {', '.join(missing)}")
    refused = sorted({a.name for a in applications if a.name in LOCALS and LOCALS[a.name].refused})
    if refused:
        raise UsageError(f"--symbolic has no formula for {refused[0]}: it {LOCALS[refused[0]].refused}",
                         hint="gradcli check EXPR gives the exact derivative of the whole expression")
    plan = make_plan(prepared.program, prepared.library)
    elements = plan.mode not in ("elementwise", "reduced")
    tensors = prepared.leaves.tensors
    if elements:
        count = sum(t.numel() for t in tensors.values())
        if count > ELEMENTS_MAX:
            raise UsageError(
                f"--symbolic writes one symbol per element for {', '.join(plan.coupling)}, and the "
                f"variables have {count} elements (at most {ELEMENTS_MAX})",
                hint="trace smaller tensors, e.g. --var 'x=randn(2,3)'",
            )
    steps_of = _first_pass(flow)
    seed_value = _seed(sp, np, output, grad_output, elements, steps_of, graph)
    composition = compose(applications, dict(tensors), output, bindings, elements=elements, seed=seed_value)
    node_of = {id(obj): node_id for node_id, obj in graph.objects.items()}
    accumulate = {id(obj.variable): node_id for node_id, obj in graph.objects.items()
                  if graph.by_id()[node_id].name == ACCUMULATE_GRAD}
    by_id = graph.by_id()
    known = proof.sizes(composition.definitions)

    env = _forward_env(composition, tensors)
    tolerance = numbers.TOLERANCES.get(str(output.dtype).removeprefix("torch."), numbers.TOLERANCES["float64"])
    seed_numbers = _seed_numbers(seed_value, steps_of, graph, env, output)
    arriving: dict[int, list[Any]] = {id(output): [seed_numbers]}
    nodes = []
    for step in reversed(composition.steps):
        if step.gradient is None:
            continue
        node_id = node_of.get(id(step.app.result.grad_fn))
        shape = tuple(step.app.result.shape)
        arrived = numbers.fitted_sum(arriving.pop(id(step.app.result), []), shape)
        numbers.bind(env, step.gradient, arrived)
        seen = steps_of.get(node_id)
        node = _node(sp, np, step, node_id, by_id, arrived, seen, tolerance)
        targets = _edge_targets(step, node_id, by_id, node_of, accumulate)
        for param, tensor in step.inputs:
            local, flowing = step.edges[param]
            value = numbers.evaluate_array(flowing, env, tuple(tensor.shape))
            arriving.setdefault(id(tensor), []).append(value)
            index = targets.get(param)
            torch_value = None
            if seen is not None and index is not None and seen.grad_inputs is not None:
                torch_value = seen.grad_inputs[index]
            node.edges.append(Edge(
                index if index is not None else -1, by_id[node_id].next[index] if index is not None else None,
                param, text_of(composition.symbols.get(id(tensor))), _local(sp, np, step, local, composition.elements),
                formula(sp, np, flowing), list(_uses(step, param)),
                Numbers(numbers.plain(value), torch_value, numbers.compare(value, torch_value, tolerance)),
                _local_value(local, env, step, elements),
            ))
        node.edges.sort(key=lambda e: e.index)
        node.span = by_id[node_id].span if node_id else None
        node.inner = [by_id[t].name for t in by_id[node_id].next if t is not None and t not in {e.to for e in node.edges}]
        nodes.append(node)
    leaves = leaf_gradients(prepared, plan, composition, arriving, accumulate, steps_of, env, known, seconds or {}, tolerance)
    shown = {node.symbol: node.definition for node in nodes}  # sum(y), not its elementwise reading
    definitions = [Definition(str(symbol), shown.get(str(symbol)) or formula(sp, np, np.asarray(expr, dtype=object)))
                   for symbol, expr in composition.definitions.items()]
    chain = ChainRule("elements" if elements else "elementwise", formula(sp, np, seed_value), nodes, leaves, definitions)
    if live:
        chain.second_graphs = _second_graphs(prepared, plan, composition, live, gradient_ids or {}, env, known, tolerance)
    return chain


def _second_graphs(
    prepared: Any, plan: Any, composition: Composition, live: dict[str, Any], gradient_ids: dict[str, dict[int, str]],
    env: dict[Any, Any], known: dict[Any, int], tolerance: tuple[float, float],
) -> list[Any]:
    """Each variable's gradient graph written out (second.py), in elementwise mode."""
    import sympy as sp

    from .leaves import expected
    from .result import SecondGraph
    from .second import second_graphs

    tensors = prepared.leaves.tensors
    live = {name: g for name, g in live.items() if name in composition.leaf_symbols}
    if composition.elements:
        return [SecondGraph(name, note="written node by node only where one symbol stands for every element "
                                       "(not for softmax, matmul or reductions over a dim)") for name in live]
    symbol_of = {id(step.app.result.grad_fn): step.out for step in composition.steps}
    variables = {name: tensors[name] for name in composition.leaf_symbols if tensors[name].requires_grad}
    firsts = expected(sp, prepared, plan, composition, known)
    return second_graphs(live, variables, composition.leaf_symbols, symbol_of, composition.definitions, env, firsts, tolerance, gradient_ids)


def _first_pass(flow: list[Any] | None) -> dict[str, Any]:
    """node id -> its flow step in the first pass."""
    if not flow:
        return {}
    first = flow[0].pass_index
    steps: dict[str, Any] = {}
    for step in flow:
        if step.pass_index == first:
            steps.setdefault(step.node, step)
    return steps


def _seed(sp: Any, np: Any, output: Any, grad_output: str | None, elements: bool, steps_of: dict[str, Any], graph: Graph) -> Any:
    """The output's starting gradient as formulas: 1 (ones), or v for a given one."""
    if grad_output is None or grad_output.strip() == "ones":
        if elements and output.dim():
            return np.full(tuple(output.shape), sp.Integer(1), dtype=object)
        return np.asarray(sp.Integer(1), dtype=object)
    if not elements:
        return np.asarray(sp.Symbol("v", real=True), dtype=object)
    seen = steps_of.get(graph.root or "")
    values = np.asarray(seen.grad_outputs[0], dtype=float) if seen is not None else np.ones(tuple(output.shape))
    return np.asarray(np.vectorize(lambda f: sp.Float(f), otypes=[object])(values), dtype=object)


def _seed_numbers(seed: Any, steps_of: dict[str, Any], graph: Graph, env: dict[Any, Any], output: Any) -> Any:
    import torch

    seen = steps_of.get(graph.root or "")
    if seed.ndim == 0 and seed.item().is_Symbol:  # v: the starting gradient torch was given
        value = torch.as_tensor(seen.grad_outputs[0], dtype=torch.float64)
        env[seed.item()] = value
        return value
    return numbers.evaluate_array(seed, env, tuple(output.shape))


def _forward_env(composition: Composition, tensors: dict[str, Any]) -> dict[Any, Any]:
    """Every forward name's value: the leaves and the outputs torch computed."""
    env: dict[Any, Any] = {}
    for name, tensor in tensors.items():
        numbers.bind(env, composition.leaf_symbols[name], tensor.detach().double())
    for step in composition.steps:
        numbers.bind(env, step.out, step.app.result.detach().double())
    return env








def _edge_targets(step: Step, node_id: str | None, by_id: dict[str, Any], node_of: dict[int, str], accumulate: dict[int, str]) -> dict[str, int]:
    """param -> the index of the edge that leads to its input, in order."""
    if node_id is None:
        return {}
    targets = by_id[node_id].next
    found: dict[str, int] = {}
    start = 0
    for param, tensor in step.inputs:
        wanted = node_of.get(id(tensor.grad_fn)) if tensor.grad_fn is not None else accumulate.get(id(tensor))
        for index in range(start, len(targets)):
            if targets[index] is not None and targets[index] == wanted:
                found[param] = index
                start = index + 1
                break
    return found


def _node(
    sp: Any, np: Any, step: Step, node_id: str | None, by_id: dict[str, Any], arrived: Any, seen: Any,
    tolerance: tuple[float, float],
) -> Node:
    from ..language.derivatives import LOCALS

    row = LOCALS[step.key]
    torch_value = seen.grad_outputs[0] if seen is not None and seen.grad_outputs else None
    definition = formula(sp, np, step.definition)
    first = step.args.get("input", step.args.get("x1"))
    if row.coupling and first.ndim == 0:  # a whole-tensor sum or mean, read elementwise
        shown = sp.Function(step.key)(first.item())
        definition = Formula(str(shown), sp.latex(shown))
    return Node(
        node_id or "?", by_id[node_id].name if node_id else "?", step.app.name, text_of(step.out),
        definition, text_of(step.gradient),
        [formula(sp, np, term) for term in step.terms], formula(sp, np, total(np, step.terms)), [],
        row.words or None, Numbers(numbers.plain(arrived), torch_value, numbers.compare(arrived, torch_value, tolerance)),
    )


def _local(sp: Any, np: Any, step: Step, local: Any, elements: bool) -> Formula:
    from ..language.derivatives import LOCALS

    row = LOCALS[step.key]
    if row.coupling and elements:  # a Jacobian: said in index notation
        return Formula(row.words, r"\text{" + row.words + "}")
    return formula(sp, np, local)


def _local_value(local: Any, env: dict[Any, Any], step: Step, elements: bool) -> Any:
    """The local derivative at the traced values, over the operation's output shape."""
    from ..language.derivatives import LOCALS

    if LOCALS[step.key].coupling and elements:
        return None
    if not any(getattr(e, "free_symbols", None) for e in local.flat):
        return None  # a number: its value is the formula
    return numbers.plain(numbers.evaluate_array(local, env, tuple(step.app.result.shape)))


def _uses(step: Step, param: str) -> tuple[str, ...]:
    from ..language.derivatives import LOCALS

    row = LOCALS[step.key]
    return row.uses if row.coupling else row.partials[param].uses

















