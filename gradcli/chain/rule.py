"""`chain_rule`: the composition (compose.py) beside torch's graph and flow, as plain data.

Each operation's output tensor has a `grad_fn`: that graph node carries the operation's
formulas. Its edges are paired with the operation's inputs in order (torch lists
`next_functions` in the order of the operation's differentiable arguments); an edge that
leads elsewhere runs through nodes torch added inside the operation (`2/x` is a
ReciprocalBackward0 under a MulBackward0), named as `inner`.
"""

from __future__ import annotations

from typing import Any

from ..inspect.graph import ACCUMULATE_GRAD, Graph
from ..verify.plan import make_plan
from . import numbers, proof
from .compose import Composition, Step, compose
from .record import Application
from .result import ChainRule, Definition, Edge, Formula, LeafGradient, Node, Numbers

#: Most variable elements given one symbol each (softmax, matmul, a reduction over a dim).
ELEMENTS_MAX = 32
#: Leaf formulas up to this size (expanded) are shown in the variables; longer ones in names.
SHOW_MAX = 80


def chain_rule(
    prepared: Any, applications: list[Application], bindings: list[tuple[str, Any]], graph: Graph,
    flow: list[Any] | None, output: Any, grad_output: str | None,
) -> ChainRule:
    """The chain rule of a traced program: `applications` as recorded while building it,
    `bindings` its assigned names, `flow` the first pass's hook records (plain steps)."""
    import numpy as np
    import sympy as sp

    from ..errors import UsageError

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
    seed_numbers = _seed_numbers(seed_value, steps_of, graph, env, output)
    arriving: dict[int, list[Any]] = {id(output): [seed_numbers]}
    nodes = []
    for step in reversed(composition.steps):
        if step.gradient is None:
            continue
        node_id = node_of.get(id(step.app.result.grad_fn))
        shape = tuple(step.app.result.shape)
        total = _sum(arriving.pop(id(step.app.result), []), shape)
        _bind_numbers(env, step.gradient, total)
        seen = steps_of.get(node_id)
        node = _node(sp, np, step, node_id, by_id, total, seen)
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
                param, _text_of(composition.symbols.get(id(tensor))), _local(sp, np, step, local, composition.elements),
                _formula(sp, np, flowing), list(_uses(step, param)),
                Numbers(numbers.plain(value), torch_value, numbers.compare(value, torch_value)),
            ))
        node.edges.sort(key=lambda e: e.index)
        node.span = by_id[node_id].span if node_id else None
        node.inner = [by_id[t].name for t in by_id[node_id].next if t is not None and t not in {e.to for e in node.edges}]
        nodes.append(node)
    leaves = _leaves(sp, np, prepared, plan, composition, arriving, accumulate, steps_of, env, known, seed_value)
    shown = {node.symbol: node.definition for node in nodes}  # sum(y), not its elementwise reading
    definitions = [Definition(str(symbol), shown.get(str(symbol)) or _formula(sp, np, np.asarray(formula, dtype=object)))
                   for symbol, formula in composition.definitions.items()]
    return ChainRule("elements" if elements else "elementwise", _formula(sp, np, seed_value), nodes, leaves, definitions)


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
        _bind_numbers(env, composition.leaf_symbols[name], tensor.detach().double())
    for step in composition.steps:
        _bind_numbers(env, step.out, step.app.result.detach().double())
    return env


def _bind_numbers(env: dict[Any, Any], symbols: Any, value: Any) -> None:
    if symbols.ndim == 0:
        env[symbols.item()] = value
        return
    for index, symbol in zip(_indices(symbols.shape), symbols.flat):
        env[symbol] = value[index]


def _indices(shape: tuple[int, ...]) -> Any:
    import numpy as np

    return np.ndindex(*shape)


def _sum(values: list[Any], shape: tuple[int, ...]) -> Any:
    import torch

    total = torch.zeros(shape, dtype=torch.float64)
    for value in values:
        total = total + numbers.fit(value, shape)
    return total


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


def _node(sp: Any, np: Any, step: Step, node_id: str | None, by_id: dict[str, Any], total: Any, seen: Any) -> Node:
    from ..language.derivatives import LOCALS

    row = LOCALS[step.key]
    torch_value = seen.grad_outputs[0] if seen is not None and seen.grad_outputs else None
    definition = _formula(sp, np, step.definition)
    if row.coupling and step.args["input"].ndim == 0:  # a whole-tensor sum or mean, read elementwise
        shown = sp.Function(step.key)(step.args["input"].item())
        definition = Formula(str(shown), sp.latex(shown))
    return Node(
        node_id or "?", by_id[node_id].name if node_id else "?", step.app.name, _text_of(step.out),
        definition, _text_of(step.gradient),
        [_formula(sp, np, term) for term in step.terms], _formula(sp, np, _total(np, step.terms)), [],
        row.words or None, Numbers(numbers.plain(total), torch_value, numbers.compare(total, torch_value)),
    )


def _local(sp: Any, np: Any, step: Step, local: Any, elements: bool) -> Formula:
    from ..language.derivatives import LOCALS

    row = LOCALS[step.key]
    if row.coupling and elements:  # a Jacobian: said in index notation
        return Formula(row.words, r"\text{" + row.words + "}")
    return _formula(sp, np, local)


def _uses(step: Step, param: str) -> tuple[str, ...]:
    from ..language.derivatives import LOCALS

    row = LOCALS[step.key]
    return row.uses if row.coupling else row.partials[param].uses


def _leaves(
    sp: Any, np: Any, prepared: Any, plan: Any, composition: Composition, arriving: dict[int, list[Any]],
    accumulate: dict[int, str], steps_of: dict[str, Any], env: dict[Any, Any], known: dict[Any, int], seed: Any,
) -> list[LeafGradient]:
    tensors = prepared.leaves.tensors
    factor = _reduction_factor(sp, plan, composition)
    outputs = [known[symbol] for step in composition.steps for symbol in step.out.flat]
    if outputs and max(outputs) > proof.EXPAND_MAX:
        expected: dict[str, Any] | str = (
            f"the expression expands to {max(outputs):,} operations (more than {proof.EXPAND_MAX}), "
            "so sympy's derivative of it was not taken"
        )
    else:
        expected = proof.reference(prepared, plan, composition.leaf_symbols, seed, factor, composition.elements)
    found = []
    for name, terms in composition.leaf_terms.items():
        if not terms:
            continue
        tensor = tensors[name]
        node_id = accumulate.get(id(tensor))
        total = _sum(arriving.get(id(tensor), []), tuple(tensor.shape))
        seen = steps_of.get(node_id or "")
        torch_value = seen.grad_outputs[0] if seen is not None and seen.grad_outputs else None
        composed = _total(np, terms)
        expanded = _expanded(np, composed, composition, known)
        if isinstance(expected, str):
            kind, said = "none", f"not compared: {expected}"
            reference = None
        elif name not in expected:
            continue
        else:
            reference = expected[name]
            kind, said = proof.prove(expanded, reference, lambda: _numeric(composed, reference, composition, tensors, env))
        shown = expanded if expanded is not None and max(proof.size(e, {}) for e in expanded.flat) <= SHOW_MAX else None
        found.append(LeafGradient(
            name, node_id, [_formula(sp, np, t) for t in terms], _formula(sp, np, composed),
            None if shown is None else _formula(sp, np, _simplified(sp, np, shown)),
            None if reference is None else _formula(sp, np, _simplified(sp, np, reference)), kind, said,
            Numbers(numbers.plain(total), torch_value, numbers.compare(total, torch_value)),
        ))
    return found


def _reduction_factor(sp: Any, plan: Any, composition: Composition) -> Any:
    if plan.mode != "reduced" or plan.reduction != "mean":
        return sp.Integer(1)
    last = composition.steps[-1] if composition.steps else None
    return 1 / sp.Integer(last.args["__numel__"]) if last is not None else sp.Integer(1)


def _expanded(np: Any, composed: Any, composition: Composition, known: dict[Any, int]) -> Any | None:
    items = [proof.expand(e, composition.definitions, known) for e in composed.flat]
    if any(item is None for item in items):
        return None
    return np.asarray(items, dtype=object).reshape(composed.shape)


def _numeric(composed: Any, reference: Any, composition: Composition, tensors: dict[str, Any], env: dict[Any, Any]) -> tuple[bool, int]:
    """Composed (through the named values) and sympy's derivative at the traced values and
    at RANDOM_POINTS points near them: (all agree, random points used)."""
    import torch

    from ..verify.symbolic import evaluate

    generator = torch.Generator().manual_seed(0)
    points = [{name: t.detach().double() for name, t in tensors.items()}]
    for _ in range(proof.RANDOM_POINTS):
        points.append({
            name: t.detach().double() * (1 + 0.1 * (2 * torch.rand(t.shape, generator=generator, dtype=torch.float64) - 1))
            for name, t in tensors.items()
        })
    for point in points:
        values: dict[Any, Any] = {}
        for name, tensor in point.items():
            _bind_numbers(values, composition.leaf_symbols[name], tensor)
        if composition.seed.ndim == 0 and composition.seed.item().is_Symbol:
            values[composition.seed.item()] = env[composition.seed.item()]
        for symbol, formula in composition.definitions.items():
            values[symbol] = evaluate(formula, values, 1).reshape(()) if _scalar(values, formula) else evaluate(formula, values, 1)
        for c, r in zip(composed.flat, reference.flat):
            a = evaluate(c, values, 1)
            b = evaluate(r, values, 1)
            if not torch.allclose(a, b, rtol=1e-7, atol=1e-10, equal_nan=True):
                return False, proof.RANDOM_POINTS
    return True, proof.RANDOM_POINTS


def _scalar(values: dict[Any, Any], formula: Any) -> bool:
    return all(values[s].dim() == 0 for s in formula.free_symbols if s in values)


def _simplified(sp: Any, np: Any, array: Any) -> Any:
    from ..verify.symbolic import simplify_all

    shown = simplify_all({i: e for i, e in enumerate(array.flat)})
    return np.asarray([shown[i] for i in range(array.size)], dtype=object).reshape(array.shape)


def _total(np: Any, terms: list[Any]) -> Any:
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return np.asarray(total, dtype=object)


def _text_of(array: Any) -> str:
    if array is None:
        return "?"
    if array.ndim == 0:
        return str(array.item())
    first = str(next(iter(array.flat)))
    return first.rsplit("_", array.ndim)[0] + "[" + ",".join(":" for _ in array.shape) + "]"


def _formula(sp: Any, np: Any, array: Any) -> Formula:
    array = np.asarray(array, dtype=object)
    expr = array.item() if array.ndim == 0 else sp.Array(array.tolist())
    return Formula(str(expr), sp.latex(expr))
