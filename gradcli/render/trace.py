"""A trace for people: sections Leaves, Graph, Passes, Gradients, Flow, as rich renderables.

Pure: `trace_renderables(result)` reads the plain `TraceResult` and returns what the CLI
prints; nothing here runs torch. The console decides colour (none on a pipe or with
NO_COLOR), so the same renderables give stable plain text in tests and scripts.
"""

from __future__ import annotations

from typing import Any

from .. import words
from .code import DEFAULT_DEPTH, code_flow, code_gradients, code_graph, code_header, code_leaves
from .graph_tree import graph_tree
from .values import fmt_value

DEFAULT_MAX_NODES = 50


def trace_renderables(result: Any, *, max_nodes: int = DEFAULT_MAX_NODES, depth: int = DEFAULT_DEPTH) -> list[Any]:
    from rich.text import Text

    if result.target is not None:
        return _code_renderables(result, max_nodes=max_nodes, depth=depth)

    out: list[Any] = [Text(f"trace  {_one_line(result.expression)}", style="bold")]
    out.append(Text(f"output: shape {result.result['shape']} {result.result['dtype']}  value {fmt_value(result.result['value'])}"))
    out += _section("Leaves", _leaves(result))
    out += _section("Graph", [])
    flow = _first_steps(result.flow) if result.flow is not None else None
    tree, hidden = graph_tree(
        result.graph, f"output grad_fn ({len(result.graph.nodes)} nodes)", max_nodes=max_nodes,
        source=result.expression, flow=flow, origin=result.nonfinite_origin,
    )
    out.append(tree)
    if hidden:
        out.append(Text(f"… {hidden} of {len(result.graph.nodes)} nodes not shown "
                        "(--max-nodes N shows more; --json and --dot are always complete)", style="dim"))
    out += _section("Passes", _passes(result))
    out += _section("Gradients", _gradients(result))
    for gradient in result.gradient_graphs:
        out += _gradient_graph(gradient, result, max_nodes)
    if result.symbolic is not None:
        from .chain import chain_lines

        out += chain_lines(result.symbolic, max_nodes=max_nodes, source=result.expression)
    if result.flow is not None:
        out += _section("Flow", _flow(result))
    out += _problems(result)
    return out


def _problems(result: Any) -> list[Any]:
    """The section of what makes the exit status 1, when there is anything."""
    from rich.text import Text

    problems = words.problem_sentences(result.problems)
    return _section("Problems (exit status 1)", [Text(f"  {p}", style="red") for p in problems]) if problems else []


def _code_renderables(result: Any, *, max_nodes: int, depth: int) -> list[Any]:
    """The same sections for the user's own code: by module and line (render/code.py)."""
    from rich.text import Text

    out: list[Any] = code_header(result)
    out.append(Text(f"output: shape {result.result['shape']} {result.result['dtype']}  value {fmt_value(result.result['value'])}"))
    out += _section("Leaves", code_leaves(result))
    out += _section("Graph", code_graph(result, depth=depth, max_nodes=max_nodes))
    out += _section("Passes", _passes(result))
    out += _section("Gradients", code_gradients(result, depth=depth))
    if result.flow is not None:
        out += _section("Flow", code_flow(result))
    out += _problems(result)
    return out


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    first = lines[0] if lines else ""
    if len(lines) > 1:
        first += f"  … ({len(lines)} lines)"
    return first if len(first) <= 100 else first[:99] + "…"


def _section(title: str, body: list[Any]) -> list[Any]:
    from rich.text import Text

    return [Text(""), Text(title, style="bold underline"), *body]


def _leaves(result: Any) -> list[Any]:
    from rich.text import Text

    lines = []
    for leaf in result.leaves:
        how = f"default {leaf.spec} (no --var given)" if leaf.defaulted else leaf.spec
        lines.append(Text(
            f"  {leaf.name}  shape {leaf.shape} {leaf.dtype} requires_grad={leaf.requires_grad}  "
            f"from {how}  value {fmt_value(leaf.value)}"
        ))
    if result.seed is not None:  # only when something random was drawn
        lines.append(Text(f"  seed {result.seed} (--seed {result.seed} repeats random values)", style="dim"))
    return lines


def _passes(result: Any) -> list[Any]:
    from rich.text import Text

    lines = []
    for p in result.passes:
        call = "torch.autograd.backward" if p.mode == "backward" else "torch.autograd.grad"
        head = f"  pass {p.index + 1}: {call}(retain_graph={p.retain_graph}, create_graph={p.create_graph})"
        if p.error is not None:
            lines.append(Text(head + "  FAILED", style="bold red"))
            lines.append(Text(f"    torch: {p.error.type}: {p.error.message}"))
            lines.append(Text(f"    why: {p.error.explanation}"))
            if p.error.fix:
                lines.append(Text(f"    fix: {p.error.fix}", style="bold"))
            continue
        lines.append(Text(head))
        for name, grad in p.grads.items():
            what = "returned d(output)/d" if p.mode == "grad" else ".grad of "
            fn = p.grad_fns.get(name)
            graph = f"  (grad_fn {fn})" if fn else ""
            bad = "  NOT FINITE" if name in p.nonfinite else ""
            lines.append(Text(f"    {what}{name}: {fmt_value(grad)}{graph}{bad}", style="red" if bad else ""))
        lines.extend(Text(f"    warning: {w}", style="yellow") for w in p.warnings)
    if result.skipped_passes:
        lines.append(Text(f"  {result.skipped_passes} later pass(es) not run after the error", style="dim"))
    if result.options.get("mode") == "grad":
        lines.append(Text("  autograd.grad returns the gradients; it does not write the leaves' .grad", style="dim"))
    if result.options.get("create_graph"):
        lines.append(Text("  create_graph: the gradients are tensors with their own grad_fn graph (below)", style="dim"))
    return lines


def _gradients(result: Any) -> list[Any]:
    from rich.text import Text

    lines = [Text(f"  {leaf.name}.grad: {fmt_value(leaf.grad)}") for leaf in result.leaves]
    last = result.passes[-1] if result.passes else None
    if last is not None and last.mode == "grad" and last.error is None:
        lines += [Text(f"  d(output)/d{name}: {fmt_value(g)}") for name, g in last.grads.items()]
    for i in result.intermediates:
        if i.retained:
            lines.append(Text(f"  {i.name}.grad: {fmt_value(i.grad)}  ({i.note})"))
        else:
            lines.append(Text(f"  {i.name}.grad: None  ({i.note})", style="dim"))
    return lines


def _gradient_graph(gradient: Any, result: Any, max_nodes: int) -> list[Any]:
    from rich.text import Text

    tree, hidden = graph_tree(
        gradient.graph, f"the gradient of {gradient.of} has its own graph ({len(gradient.graph.nodes)} nodes)",
        max_nodes=max_nodes, source=result.expression,
    )
    out = [Text(""), Text(f"Graph of the gradient of {gradient.of} (create_graph)", style="bold underline"), tree]
    if hidden:
        out.append(Text(f"… {hidden} nodes not shown", style="dim"))
    if gradient.second is not None:
        out.append(Text(f"  d/d{gradient.of} sum(gradient) = {fmt_value(gradient.second)}  "
                        "(backward through this graph: the second derivative, elementwise for elementwise functions)"))
    else:
        out.append(Text(f"  {gradient.note}", style="dim"))
    return out


def _first_steps(steps: list[Any]) -> dict[str, Any]:
    first: dict[str, Any] = {}
    for step in steps:
        first.setdefault(step.node, step)
    return first


def _flow(result: Any) -> list[Any]:
    from rich.text import Text

    names = {node.id: node.name for node in result.graph.nodes}
    order = [step.node for step in result.flow if step.pass_index == 0]
    shown = ", ".join(order[:20]) + (f", … ({len(order)} in all)" if len(order) > 20 else "")
    lines = [Text(f"  pass 1 ran the nodes in this order: {shown or '(none)'}"),
             Text("  (the tree shows each node's incoming and outgoing gradient in the first pass that ran it)", style="dim")]
    origin = result.nonfinite_origin
    if origin is None:
        lines.append(Text("  every gradient that flowed was finite", style="green"))
    else:
        lines.append(Text(f"  origin of the first non-finite gradient: {origin} {names.get(origin, '')}", style="bold red"))
        if result.cause is not None:
            from .. import words

            lines += [Text(f"  {text}") for text in words.cause_lines(result.cause, rewrites=False)]
    return lines
