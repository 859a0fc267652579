"""A trace of the user's own code for people: the graph folded by module, each node's line.

A model's graph has thousands of nodes; what a person reads is which module and which line
made them. Nodes are listed in the walk's order (from the output back to the parameters);
a node made inside a module deeper than `depth` is folded into one line for that module
(its node count, parameter count, input and output shapes), shown where the walk first
meets it. Parameters are counted, not listed one by one; the JSON and DOT are complete.
Pure: reads the plain TraceResult, returns rich renderables.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from ..graph.walk import ACCUMULATE_GRAD
from ..words import plural
from .values import fmt_value

#: Modules at depth 1 (a ResNet's layer1..layer4) shown, their submodules folded: a
#: ResNet-18 fits on one screen.
DEFAULT_DEPTH = 1


def module_words(path: str | None, cls: str | None) -> str:
    """`encoder.fc1 (Linear)`; the root module is shown by its class alone."""
    if cls is None:
        return ""
    return f"{path} ({cls})" if path else cls


def line_words(origin: Any) -> str:
    """`mlp.py:15  h = self.act(self.fc1(x))`."""
    if origin is None or origin.line is None:
        return ""
    file = (origin.file or "").rsplit("/", 1)[-1]
    return f"{file}:{origin.line}  {origin.code or ''}".rstrip()


def folded_key(path: str | None, depth: int) -> str | None:
    """The module deeper than `depth` that a node is folded into (`layer1.0` at depth 1), or
    None when the node is shown itself (its module is at most `depth` deep)."""
    if not path:
        return None
    parts = path.split(".")
    return ".".join(parts[: depth + 1]) if len(parts) > depth else None


def code_header(result: Any) -> list[Any]:
    from rich.text import Text

    target = result.target or {}
    return [Text(f"trace  {target.get('name', result.expression)}", style="bold"),
            Text(f"found: {target.get('found', '')}")]


def code_leaves(result: Any) -> list[Any]:
    """Inputs one per line; parameters counted (every one is in --json)."""
    from rich.text import Text

    params = [leaf for leaf in result.leaves if leaf.spec.startswith("parameter")]
    inputs = [leaf for leaf in result.leaves if not leaf.spec.startswith("parameter")]
    lines = []
    for leaf in inputs:
        lines.append(Text(
            f"  input {leaf.name}  shape {leaf.shape} {leaf.dtype} requires_grad={leaf.requires_grad}  "
            f"from {leaf.spec}  value {_value(leaf.value)}"
        ))
    if params:
        count = sum(_numel(leaf.shape) for leaf in params)
        training = sum(1 for leaf in params if leaf.requires_grad)
        lines.append(Text(f"  parameters: {len(params)} tensors, {count:,} values, {training} require grad "
                          "(each with its gradient in --json)"))
    lines.append(Text(f"  seed {result.seed} (--seed {result.seed} repeats random values)", style="dim"))
    return lines


def code_graph(result: Any, *, depth: int = DEFAULT_DEPTH, max_nodes: int = 50) -> list[Any]:
    """The graph as lines in walk order, folded by module below `depth`."""
    from rich.text import Text

    graph = result.graph
    if graph.root is None:
        return [Text("  (no nodes: the output has no grad_fn)", style="dim")]
    modules = {m["path"]: m for m in result.modules or []}
    folded_counts = Counter(folded_key(_path(node), depth) for node in graph.nodes)
    flow_origin = result.nonfinite_origin
    origin_group = next((folded_key(_path(n), depth) for n in graph.nodes if n.id == flow_origin), None)
    modified_groups = {folded_key(_path(n), depth) for n in graph.nodes if _modified(n)}
    lines: list[Any] = [Text(f"  {len(graph.nodes)} nodes, walked from the output; modules deeper than "
                             f"{depth} folded (--depth N)", style="dim")]
    shown_groups: set[str] = set()
    shown = 0
    for node in graph.nodes:
        key = folded_key(_path(node), depth)
        if key is not None:
            if key in shown_groups:
                continue
            shown_groups.add(key)
            line = _group_line(key, modules.get(key), folded_counts[key], node, key == origin_group)
            if key in modified_groups:
                line.append("  ◀ a saved tensor inside was modified in place", style="bold red")
            lines.append(line)
        else:
            lines.append(_node_line(node, is_origin=node.id == flow_origin))
        shown += 1
        if shown >= max_nodes:
            lines.append(Text("  … more lines not shown (--max-nodes N shows more, --depth folds more; "
                              "--json and --dot are complete)", style="dim"))
            break
    return lines


def _path(node: Any) -> str | None:
    return node.origin.module if node.origin is not None else None


def _modified(node: Any) -> bool:
    """Whether one of the node's saved tensors was changed in place after it was saved."""
    return any(isinstance(v, dict) and "modified" in v for v in node.saved.values())


def _node_line(node: Any, *, is_origin: bool) -> Any:
    from rich.text import Text

    line = Text("  ")
    line.append(node.id + " ", style="dim")
    if node.name == ACCUMULATE_GRAD:
        line.append("AccumulateGrad", style="bold")
        line.append(f"  {node.variable}", style="cyan")
    else:
        line.append(node.name, style="bold")
        if node.label:
            line.append(f"  = {node.label}", style="magenta")
    origin = node.origin
    if origin is not None:
        where = module_words(origin.module, origin.module_class)
        if where:
            line.append(f"  {where}", style="blue")
        text = line_words(origin)
        if text:
            line.append(f"  {text}", style="dim")
    if _modified(node):
        line.append("  ◀ a saved tensor was modified in place", style="bold red")
    if is_origin:
        line.append("  ◀ ORIGIN: first non-finite gradient", style="bold red")
    return line


def _group_line(key: str, module: dict[str, Any] | None, count: int, first: Any, has_origin: bool) -> Any:
    from rich.text import Text

    line = Text("  ▸ ")
    cls = module["class"] if module else (first.origin.module_class if first.origin else "?")
    line.append(module_words(key, cls), style="bold blue")
    facts = [plural(count, "node")]
    if module is not None:
        if module.get("parameters") is not None:
            facts.append(f"{module['parameters']:,} parameters")
        if module.get("inputs") is not None:
            facts.append(f"in {_shapes(module['inputs'])} → out {_shapes(module.get('output') or [])}")
    line.append("  " + ", ".join(facts))
    if has_origin:
        line.append("  ◀ ORIGIN: first non-finite gradient inside", style="bold red")
    return line


def code_gradients(result: Any, *, depth: int = DEFAULT_DEPTH) -> list[Any]:
    """Inputs' gradients, and parameters' gradients summed up per module at `depth`."""
    from rich.text import Text

    lines = []
    for leaf in result.leaves:
        if not leaf.spec.startswith("parameter") and leaf.requires_grad:
            lines.append(Text(f"  {leaf.name}.grad: {_value(leaf.grad)}"))
    last = result.passes[-1] if result.passes else None
    if last is not None and last.mode == "grad" and last.error is None:  # returned, not written to .grad
        lines += [Text(f"  d(output)/d{name}: {_value(g)}") for name, g in last.grads.items()]
    groups: dict[str, list[Any]] = {}
    for leaf in result.leaves:
        if leaf.spec.startswith("parameter"):
            parts = leaf.name.split(".")[:-1]
            groups.setdefault(".".join(parts[:depth]) if parts else "", []).append(leaf)
    for key, leaves in groups.items():
        missing = [leaf.name for leaf in leaves if leaf.grad is None and leaf.requires_grad]
        grads = [leaf.grad for leaf in leaves if leaf.grad is not None]
        norm = sum(_sumsq(grad) for grad in grads) ** 0.5
        if math.isinf(norm):  # the squares overflowed (values beyond ~1e154): hypot scales
            norm = math.hypot(*(size for grad in grads for size in _sizes(grad)))
        text = f"  {key or '(root)'}: {len(leaves)} parameters"
        if grads:  # with none, a norm of 0.0 would read as zero gradients: NO GRAD is not ZERO
            text += f", gradient norm {fmt_value(norm)}"
        elif not missing:
            text += ", none requires grad"
        style = ""
        if missing:
            text += f"; .grad is None for {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''}"
            style = "yellow"
        lines.append(Text(text, style=style))
    return lines


def code_flow(result: Any) -> list[Any]:
    """Where the first non-finite gradient and the first non-finite forward value came from."""
    from rich.text import Text

    lines = []
    nodes = result.graph.by_id()
    origin = result.nonfinite_origin
    if origin is None:
        lines.append(Text("  every gradient that flowed was finite", style="green"))
        if result.cause is not None:  # finite, but one lost its digits (issue 15's cancellation)
            from .. import words

            lines += [Text(f"  {text}", style="red" if k == 0 else "")
                      for k, text in enumerate(words.cause_lines(result.cause, rewrites=False))]
    else:
        node = nodes.get(origin)
        where = ""
        if node is not None and node.origin is not None:
            where = f"  {module_words(node.origin.module, node.origin.module_class)}  {line_words(node.origin)}"
        lines.append(Text(f"  first non-finite gradient: {origin} {node.name if node else ''}{where}", style="bold red"))
        if result.cause is not None:  # issue 15: why, from the same node-level reasoning as check
            from .. import words

            lines += [Text(f"  {text}") for text in words.cause_lines(result.cause, rewrites=False)]
    forward = result.forward_nonfinite
    if forward is not None:
        lines += _forward_nonfinite_lines(forward)
    elif result.flow is not None:
        lines.append(Text("  every value forward computed was finite", style="green"))
    return lines


def _forward_nonfinite_lines(forward: dict[str, Any]) -> list[Any]:
    """The first non-finite value in forward (an inf the user wrote said so), and apart the
    first nan when it came later (softmax of a fully masked row)."""
    from rich.text import Text

    def place(event: dict[str, Any]) -> str:
        file = (event["file"] or "").rsplit("/", 1)[-1]
        return (f"shape {event['shape']}  {module_words(event['module'], event['module_class'])}  "
                f"{file}:{event['line']}  {event['code'] or ''}")

    kind = forward.get("kind") or "nan/inf"
    written = "  (a constant you wrote, not an overflow)" if forward.get("written") else ""
    lines = [Text(f"  first non-finite value in forward ({kind}): {forward['call']}() -> "
                  f"{forward['node'] or 'no grad_fn'} {place(forward)}{written}", style="bold red")]
    nan = forward.get("first_nan")
    if nan is not None:
        rows = (f"  ({nan['masked_rows']:,} row{'s' if nan['masked_rows'] != 1 else ''} of its input -inf "
                "throughout: 0/0)" if nan.get("masked_rows") else "")
        lines.append(Text(f"  first nan in forward: {nan['call']}() -> {nan['node'] or 'no grad_fn'} {place(nan)}"
                          f"{rows}", style="bold red"))
    first = "the nan's line above" if nan is not None else "the first line above"
    lines.append(Text(f"  (a nan loss usually starts in forward: fix {first} first)", style="dim"))
    return lines


def _shapes(shapes: list[list[int]]) -> str:
    return ", ".join(str(s) for s in shapes) if shapes else "-"


def _numel(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _value(value: Any) -> str:
    if isinstance(value, dict):  # a large tensor kept as a summary
        return f"[{', '.join(fmt_value(v) for v in value['preview'])}, …] (shape {value['shape']})"
    return fmt_value(value)


def _sumsq(value: Any) -> float:
    if isinstance(value, dict):  # a summary: trace gives it the norm
        return _square(value.get("norm", 0.0))
    if isinstance(value, list):
        return sum(_sumsq(v) for v in value)
    return _square(value) if isinstance(value, (int, float)) else 0.0


def _square(value: float) -> float:
    # ** as before (v * v differs from it in the last digit for some v), but a square
    # beyond float64's range is inf where ** raises OverflowError.
    try:
        return float(value) ** 2
    except OverflowError:
        return math.inf


def _sizes(value: Any) -> list[float]:
    """The numbers `_sumsq` squares (a summary's norm for a summary), unsquared."""
    if isinstance(value, dict):
        return [float(value.get("norm", 0.0))]
    if isinstance(value, list):
        return [size for v in value for size in _sizes(v)]
    return [float(value)] if isinstance(value, (int, float)) else []
