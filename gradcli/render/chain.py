"""`trace --symbolic` for people: the chain rule node by node, as rich Text lines.

Pure: reads the plain `ChainRule` (chain/result.py). Each backward node shows the value it
computes as a formula, the gradient arriving at it (each path's term, then their sum), and
per input edge the local derivative and the gradient sent along it; every formula's value
at the traced values stands beside what torch's hooks saw. Each leaf shows its composed
gradient, sympy's derivative and how they were shown equal. Large graphs fold as the tree
does (--max-nodes); formulas stay one operation deep, in the named values listed last.
"""

from __future__ import annotations

from typing import Any

from .values import fmt_value, source_excerpt


#: How a leaf's proof is coloured: proved or equal numerically, DIFFERS, not compared.
_PROOF_STYLE = {"simplify": "green", "numeric": "green", "differs": "bold red", "none": "yellow"}

def chain_lines(chain: Any, *, max_nodes: int, source: str = "") -> list[Any]:
    from rich.text import Text

    out = [Text(""), Text("Chain rule (--symbolic)", style="bold underline")]
    how = "one symbol stands for every element" if chain.mode == "elementwise" else "one symbol per element"
    out.append(Text(f"  g_h is the gradient arriving at h, the output's starts as {chain.seed.text}; {how}", style="dim"))
    out.append(Text("  each formula's value at the traced values is followed by what torch's hooks saw", style="dim"))
    for node in chain.nodes[:max_nodes]:
        out += _node(node, source)
    if len(chain.nodes) > max_nodes:
        out.append(Text(f"  … {len(chain.nodes) - max_nodes} of {len(chain.nodes)} nodes not shown "
                        "(--max-nodes N shows more; --json is complete)", style="dim"))
    for leaf in chain.leaves:
        out += _leaf(leaf)
    out += _definitions(chain, max_nodes)
    for graph in chain.second_graphs:
        out += _second_graph(graph, max_nodes)
    return out


def _second_graph(graph: Any, max_nodes: int) -> list[Any]:
    """--create-graph: sum(gradient) backpropagated through the gradient's own graph."""
    from rich.text import Text

    out = [Text(""), Text(f"Second derivative: the graph of {graph.of}'s gradient, node by node", style="bold underline")]
    if graph.note is not None:
        return out + [Text(f"  {graph.note}", style="yellow")]
    out.append(Text("  sum(gradient) backpropagated: gg_w is the gradient arriving at w, the gradient's own starts as 1",
                    style="dim"))
    if graph.constants:
        out.append(Text("  constants (values no variable reaches): "
                        + "; ".join(f"{c.symbol} = {c.formula.text}" for c in graph.constants), style="dim"))
    for node in graph.nodes[:max_nodes]:
        out += _node(node, "")
    if len(graph.nodes) > max_nodes:
        out.append(Text(f"  … {len(graph.nodes) - max_nodes} of {len(graph.nodes)} nodes not shown "
                        "(--max-nodes N shows more; --json is complete)", style="dim"))
    for leaf in graph.leaves:
        out.append(Text(f"  d/d{leaf.variable} sum(gradient of {graph.of})", style="bold"))
        out.append(Text(f"    paths: {' + '.join(t.text for t in leaf.terms)}"))
        if leaf.expanded is not None:
            out.append(Text(f"    composed = {leaf.expanded.text}"))
        if leaf.reference is not None:
            out.append(Text(f"    sympy's second derivative: {leaf.reference.text}"))
        style = _PROOF_STYLE.get(leaf.proof, "")
        out.append(Text(f"    {leaf.proof_words}", style=style))
        out.append(_numbered("    by the formula", leaf.numbers, torch_word="torch's double backward"))
    if graph.definitions:
        shown = graph.definitions[: 2 * max_nodes]
        out.append(Text("  where " + "; ".join(f"{d.symbol} = {d.formula.text}" for d in shown), style="dim"))
    return out


def _node(node: Any, source: str) -> list[Any]:
    from rich.text import Text

    excerpt = source_excerpt(source, node.span) if node.span is not None else ""
    written = f"  ‹{excerpt}›" if excerpt else ""
    lines = [Text(f"  {node.node} {node.name}{written}   {node.symbol} = {node.definition.text}", style="bold")]
    if node.words:
        lines.append(Text(f"    {node.words}", style="dim"))
    arriving = f"    {node.gradient} = "
    if len(node.terms) > 1:
        lines.append(Text(arriving + " + ".join(t.text for t in node.terms) + f"   ({len(node.terms)} paths meet)"))
        arriving = " " * len(arriving)
    lines.append(_numbered(arriving + node.total.text, node.numbers))
    for edge in node.edges:
        uses = f" [{', '.join(edge.uses)}]" if edge.uses else ""
        to = f"edge {edge.index} → {edge.to}" if edge.index >= 0 else "edge (through torch's inner nodes)"
        at = "" if edge.local_value is None else f" = {fmt_value(edge.local_value)}"
        if node.words is not None and edge.local.text == node.words:  # a Jacobian, said above
            lines.append(Text(f"    {to} ({edge.input}): the gradient times that Jacobian{uses}"))
        else:
            lines.append(Text(f"    {to} ({edge.input}): ∂{node.symbol}/∂{edge.input} = {edge.local.text}{at}{uses}"))
        lines.append(_numbered(f"      gradient {edge.gradient.text}", edge.numbers))
    if node.inner:
        lines.append(Text(f"    torch computes this with inner nodes too: {', '.join(node.inner)}", style="dim"))
    return lines


def _leaf(leaf: Any) -> list[Any]:
    from rich.text import Text

    lines = [Text(f"  leaf {leaf.variable} ({leaf.node})", style="bold")]
    lines.append(Text(f"    paths: {' + '.join(t.text for t in leaf.terms)}"))
    lines.append(Text(f"    composed: {leaf.composed.text}"))
    if leaf.expanded is not None:
        lines.append(Text(f"      = {leaf.expanded.text}"))
    if leaf.reference is not None:
        lines.append(Text(f"    sympy's derivative: {leaf.reference.text}"))
    style = _PROOF_STYLE.get(leaf.proof, "")
    lines.append(Text(f"    {leaf.proof_words}", style=style))
    lines.append(_numbered(f"    {leaf.variable}.grad by the formula", leaf.numbers, torch_word="torch accumulated"))
    if leaf.second is not None:
        lines.append(_numbered(f"    d/d{leaf.variable} sum(gradient) = {leaf.second.text}", leaf.second_numbers,
                               torch_word="torch, through the gradient's graph"))
    return lines


def _definitions(chain: Any, max_nodes: int) -> list[Any]:
    from rich.text import Text

    shown = chain.definitions[: 2 * max_nodes]
    lines = [Text("  where " + "; ".join(f"{d.symbol} = {d.formula.text}" for d in shown), style="dim")]
    if len(chain.definitions) > len(shown):
        lines.append(Text(f"  … {len(chain.definitions) - len(shown)} more named values (--json has all)", style="dim"))
    return lines


def _numbered(text: str, numbers: Any, torch_word: str = "torch") -> Any:
    from rich.text import Text

    if numbers is None:
        return Text(text)
    line = f"{text} = {fmt_value(numbers.value)}"
    if numbers.agrees is None:
        return Text(line + "   (torch's hook saw no value here)")
    if numbers.agrees:
        return Text(line + f"   {torch_word} {fmt_value(numbers.torch)} ✓")
    return Text(line + f"   {torch_word} {fmt_value(numbers.torch)} DIFFERS", style="bold red")
