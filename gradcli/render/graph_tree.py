"""An autograd graph as a rich tree: each node once, later meetings as references.

The tree follows the walk from the output (the JSON's node order). A DAG drawn as a tree
would repeat shared parts (2^40 times for the doubling program), so a node met again is a
one-line reference (`↑ n3 MulBackward0, shown above`). A plain chain (a node whose only
input is a node nothing else uses) continues in the same tree item, marked `↓`, instead of
indenting once per link: a 20,000-link chain would otherwise need 80,000 columns. At most
`max_nodes` nodes are drawn; the rest are folded and counted.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from ..graph.walk import ACCUMULATE_GRAD
from .values import fmt_value, source_excerpt


def graph_tree(
    graph: Any,
    title: str,
    *,
    max_nodes: int,
    source: str = "",
    flow: dict[str, Any] | None = None,
    origin: str | None = None,
) -> tuple[Any, int]:
    """(rich Tree, the number of nodes folded away)."""
    from rich.text import Text
    from rich.tree import Tree

    tree = Tree(Text(title), guide_style="dim")
    if graph.root is None:
        tree.add(Text("(no nodes: the output is a leaf, so backward writes its .grad directly)"))
        return tree, 0
    nodes = graph.by_id()
    uses = Counter(child for node in graph.nodes for child in node.next if child is not None)
    shown: set[str] = set()
    describe = _describer(source, flow or {}, origin)
    stack: list[tuple[str | None, Any]] = [(graph.root, tree)]
    while stack:
        node_id, parent = stack.pop()
        if node_id is None:
            parent.add(Text("None  (an input that needs no gradient)", style="dim"))
            continue
        node = nodes[node_id]
        if node_id in shown:
            parent.add(Text(f"↑ {node.id} {_short(node)}, shown above", style="dim"))
            continue
        if len(shown) >= max_nodes:
            parent.add(Text(f"… {node.id} {_short(node)} and what it leads to, folded", style="dim"))
            continue
        lines: list[Text] = []
        while True:  # one tree item: the node, then the plain chain below it
            shown.add(node.id)
            lines.extend(describe(node, chained=bool(lines)))
            single = node.next[0] if len(node.next) == 1 else None
            if single is None or uses[single] != 1 or single in shown or len(shown) >= max_nodes:
                break
            node = nodes[single]
        item = parent.add(Text("\n").join(lines))
        stack.extend((child, item) for child in reversed(node.next))
    return tree, len(graph.nodes) - len(shown)


def _short(node: Any) -> str:
    if node.name == ACCUMULATE_GRAD:
        return f"AccumulateGrad ({node.variable})"
    return f"{node.name} ({node.label})" if node.label else node.name


def _describer(source: str, flow: dict[str, Any], origin: str | None) -> Callable[..., list[Any]]:
    from rich.text import Text

    def describe(node: Any, *, chained: bool) -> list[Any]:
        head = Text("↓ " if chained else "")
        head.append(node.id + " ", style="dim")
        head.append(node.name, style="bold")
        if node.variable is not None:
            head.append(f"  variable {node.variable}", style="cyan")
        if node.label:
            head.append(f"  = {node.label}", style="magenta")
        excerpt = source_excerpt(source, node.span)
        if excerpt:
            head.append(f"  ‹{excerpt}›", style="dim")
        if node.same_as:
            head.append(f"  (node {node.same_as} of the traced graph)", style="dim")
        if node.id == origin:
            head.append("  ◀ ORIGIN: first non-finite gradient", style="bold red")
        lines = [head]
        for key, value in node.saved.items():
            lines.append(Text(f"    {key}: {_saved(value)}", style="yellow"))
        step = flow.get(node.id)
        if step is not None:
            leaving = "(raised)" if step.grad_inputs is None else fmt_value(step.grad_inputs)
            lines.append(Text(f"    grad in: {fmt_value(step.grad_outputs)}  out: {leaving}", style="green"))
        return lines

    return describe


def _saved(value: Any) -> str:
    if isinstance(value, dict) and "freed" in value:
        return f"(freed: {value['freed']})"
    if isinstance(value, dict) and "modified" in value:
        return "(modified in place after it was saved: backward will fail)"
    if isinstance(value, dict) and "shape" in value:
        return _saved_tensor(value)
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        return "[" + ", ".join(_saved_tensor(v) if isinstance(v, dict) else fmt_value(v) for v in value) + "]"
    return fmt_value(value)


def _saved_tensor(value: dict[str, Any]) -> str:
    if "variable" in value:
        return f"the leaf {value['variable']} {value['shape']}"
    if "bound" in value:
        return f"{value['bound']} {value['shape']}"
    more = " …" if value["numel"] > len(value["preview"]) else ""
    values = ", ".join(fmt_value(v) for v in value["preview"])
    return f"tensor {value['shape']} {value['dtype']} [{values}{more}]"
