"""A trace's graph as Graphviz DOT text: plain data in, DOT out.

Edges run the way values flowed forward (leaf -> operation -> output), as torchviz draws
them, so the output sits at the bottom of `dot -Tsvg`. Leaves (AccumulateGrad) are light
blue boxes with the variable's name; saved tensors are orange ellipses joined to their node
by a dashed edge (a saved tensor that is a leaf points at that leaf instead, rather than
being merged into it); nodes bound to an assigned name are labelled `h = MulBackward0`; the
output's node is green. Every distinct node appears once, as in the JSON.
"""

from __future__ import annotations

from typing import Any

from ..graph.walk import ACCUMULATE_GRAD
from .contract import Format

_HEADER = (
    "digraph autograd {\n"
    '  graph [rankdir=TB, fontname="Helvetica"];\n'
    '  node [shape=box, style=filled, fillcolor=white, fontname="Helvetica", fontsize=11];\n'
)


def quote(text: str) -> str:
    """A DOT double-quoted string (newlines as DOT's centred line break)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def trace_dot(result: Any, *, formulas: bool = False) -> str:
    """The DOT text of the traced graph; with `formulas` (trace --symbolic --dot-formulas)
    each edge is labelled with the gradient the chain rule sends along it."""
    graph = result.graph
    leaves = {leaf.name: leaf for leaf in result.leaves}
    labels = _edge_formulas(result) if formulas else {}
    lines = [_HEADER]
    code = result.target is not None
    if code:  # nodes drawn inside their modules' clusters, edges below
        lines.extend(module_clusters(graph, lambda node: _node(node, leaves, is_root=node.id == graph.root, code=True)))
    for node in graph.nodes:
        if not code:
            lines.append(_node(node, leaves, is_root=node.id == graph.root))
        for index, child in enumerate(node.next):
            if child is not None:
                label = labels.get((node.id, index))
                lines.append(f"  {child} -> {node.id};\n" if label is None else
                             f"  {child} -> {node.id} [label={quote(label)}, fontsize=9];\n")
        for key, value in node.saved.items():
            lines.extend(_saved(node, key, value))
    if graph.root is not None:
        lines.append(f'  output [shape=plaintext, style="", label={quote(_output_label(result))}];\n')
        lines.append(f"  {graph.root} -> output;\n")
    lines.append("}\n")
    return "".join(lines)


def _node(node: Any, leaves: dict[str, Any], *, is_root: bool, code: bool = False) -> str:
    if node.name == ACCUMULATE_GRAD:
        leaf = leaves.get(node.variable or "")
        text = f"{node.variable}\n{leaf.shape}" if leaf is not None else str(node.variable)
        return f"  {node.id} [label={quote(text)}, fillcolor=lightblue, tooltip={quote(node.name)}];\n"
    text = f"{node.label} = {node.name}" if node.label else node.name
    if code and node.origin is not None and node.origin.line is not None:
        file = (node.origin.file or "").rsplit("/", 1)[-1]
        text += f"\n{file}:{node.origin.line}"
        colour = "darkolivegreen1" if is_root else "lightgrey"
        tip = node.origin.code or ""
        return f"  {node.id} [label={quote(text)}, fillcolor={colour}, tooltip={quote(tip)}];\n"
    colour = "darkolivegreen1" if is_root else "lightgrey"
    return f"  {node.id} [label={quote(text)}, fillcolor={colour}];\n"


def module_clusters(graph: Any, draw: Any) -> list[str]:
    """The nodes, each inside nested `subgraph cluster_*` blocks, one per module on its path
    (`encoder` holds `encoder.layers.0`, which holds its nodes); nodes of no module are top-level."""
    children: dict[str, list[str]] = {}
    members: dict[str, list[Any]] = {}
    classes: dict[str, str] = {}
    for node in graph.nodes:
        origin = node.origin
        path = origin.module if origin is not None and origin.module is not None else None
        if path is None:
            members.setdefault("", []).append(node)
            continue
        key = f".{path}" if path else "."  # "." is the root module, "" is outside every module
        classes[key] = origin.module_class or ""
        members.setdefault(key, []).append(node)
        while key not in ("", "."):
            parent = key.rsplit(".", 1)[0] or "."
            if key not in children.setdefault(parent, []):
                children[parent].append(key)
            if parent == ".":
                break
            key = parent
    if "." in members or "." in children:
        children.setdefault("", []).append(".")
    lines: list[str] = []
    counter = [0]

    def emit(key: str, indent: str) -> None:
        for node in members.get(key, []):
            lines.append(indent + draw(node).lstrip())
        for child in children.get(key, []):
            counter[0] += 1
            path = child[1:]
            label = f"{path} ({classes[child]})" if path else classes.get(child, "model")
            lines.append(f"{indent}subgraph cluster_{counter[0]} {{\n")
            lines.append(f'{indent}  label={quote(label)}; style="rounded,dashed"; color=grey50; fontsize=10;\n')
            emit(child, indent + "  ")
            lines.append(f"{indent}}}\n")

    emit("", "  ")
    return lines


def _saved(node: Any, key: str, value: Any) -> list[str]:
    if not isinstance(value, dict) or "shape" not in value:
        return []  # scalar attributes (exponents, dims) stay in the JSON and the tree
    saved_id = f"{node.id}_{key.removeprefix('_saved_')}"
    # A saved leaf is named, not merged into the leaf's own box (torchviz merges them).
    name = value.get("variable") or value.get("bound")
    what = f"= {name}" if name else str(value["shape"])
    label = quote(key + "\n" + what)
    return [
        f"  {saved_id} [shape=ellipse, fillcolor=orange, fontsize=9, label={label}];\n",
        f"  {saved_id} -> {node.id} [style=dashed, arrowhead=none];\n",
    ]


def _edge_formulas(result: Any) -> dict[tuple[str, int], str]:
    chain = result.symbolic
    if chain is None:
        return {}
    return {(node.node, edge.index): edge.gradient.text for node in chain.nodes for edge in node.edges if edge.index >= 0}


def _output_label(result: Any) -> str:
    return f"output {result.result.get('shape')}"


class DotFormat(Format):
    """`--dot`: a trace's graph as Graphviz DOT text."""

    name = "dot"

    def _render_TraceResult(self, result: Any) -> str:
        return trace_dot(result, formulas=self.options.get("formulas", False))
