"""Draw a demo's blocks: headings, prose, highlighted code, and what the code produced.

Code is indented four spaces and output lines start with `#> ` (as reprex prints them), so
a block copied from the terminal, output included, still runs as Python. Colour and syntax
highlighting only on a terminal; plain text otherwise (the CLI's console decides).
"""

from __future__ import annotations

import textwrap
from typing import Any

from ..demos.runner import Block, Code, GraphDrawing, Heading, Prose, Shell, Verdict
from .contract import Line

INDENT = "    "
OUTPUT_PREFIX = "#> "
PROSE_WIDTH = 100  # long prose lines tire the eye even on a wide terminal
MAX_DRAWN_NODES = 60


def spacing(previous: Block | None, block: Block) -> list[Line]:
    """The blank lines before a block: one between blocks (none between code and its
    verdict, none after a heading), and one more before a heading."""
    if previous is None:
        return []
    blank = [Line("")] if not isinstance(block, Verdict) and not isinstance(previous, Heading) else []
    return blank + ([Line("")] if isinstance(block, Heading) else [])


def block_lines(block: Block, *, width: int, color: bool) -> list[Line]:
    """One block as lines: a rule, wrapped prose, code and its output, a verdict, a graph."""
    from rich.rule import Rule
    from rich.text import Text

    if isinstance(block, Heading):
        return [Line(Rule(Text(block.text, style="bold cyan"), align="left", style="cyan"))]
    if isinstance(block, Prose):
        return [Line(Text(line), soft_wrap=True) for line in textwrap.wrap(block.text, min(width, PROSE_WIDTH))]
    if isinstance(block, Code):
        out = _code_lines(block.source, color)
        if block.output:
            out += [Line(Text(line, style="green"), soft_wrap=True) for line in output_lines(block.output, width)]
        return out
    if isinstance(block, Verdict):
        mark, style = ("✓", "bold green") if block.ok else ("✗", "bold red")
        return [Line(Text(f"{INDENT}{mark} {block.text}", style=style), soft_wrap=True)]
    if isinstance(block, GraphDrawing):
        from .graph_tree import graph_tree

        tree, _ = graph_tree(block.graph, block.title, max_nodes=MAX_DRAWN_NODES, source=block.source)
        return [Line(Unpadded(tree), soft_wrap=True)]
    if isinstance(block, Shell):
        return [Line(Text(f"{INDENT}$ {block.text}", style="bold"), soft_wrap=True)]
    raise TypeError(f"no renderer for {type(block).__name__}")  # a new block type needs its own branch


def summary_lines(verdicts: list[Verdict]) -> list[Line]:
    """The closing line: how many of the demo's checks agreed, and which failed."""
    from rich.text import Text

    failed = [v for v in verdicts if not v.ok]
    if not failed:
        return [Line(""), Line(Text(f"All {len(verdicts)} checks agreed.", style="bold green"))]
    return [Line(""), Line(Text(f"{len(failed)} of {len(verdicts)} checks failed:", style="bold red")),
            *(Line(Text(f"{INDENT}✗ {v.text}", style="red"), soft_wrap=True) for v in failed)]


def output_lines(output: str, width: int) -> list[str]:
    """What code produced, as `#> ` lines no wider than the console.

    A long line is wrapped with a hanging indent, so a wrapped line reads as the continuation
    of the one above rather than as a line of its own.
    """
    room = max(20, width - len(INDENT) - len(OUTPUT_PREFIX))
    lines = []
    for line in output.splitlines():
        lead = line[: len(line) - len(line.lstrip())]
        pieces = textwrap.wrap(
            line, room, subsequent_indent=lead + "    ", break_long_words=False, break_on_hyphens=False,
        ) if len(line) > room else [line]
        lines += [f"{INDENT}{OUTPUT_PREFIX}{piece}".rstrip() for piece in pieces or [""]]
    return lines


class Unpadded:
    """A renderable drawn indented, without the blanks rich pads each line with (they spoil
    copying); laid out at print time, on the console's own width and characters."""

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        width = options.update_width(max(20, options.max_width - len(INDENT)))
        for segments in console.render_lines(self.renderable, width, pad=False):
            line = Text.assemble(INDENT, *((s.text, s.style) for s in segments if not s.control))
            line.rstrip()
            yield line if line.plain.strip() else Text()


def _code_lines(source: str, color: bool) -> list[Line]:
    from rich.syntax import Syntax
    from rich.text import Text

    if not color:
        return [Line(Text(f"{INDENT}{line}".rstrip()), soft_wrap=True) for line in source.splitlines()]
    # highlight() gives styled text without Syntax's padding to the full width, so copying
    # from the terminal gets no trailing blanks; ansi_dark leaves plain names in the
    # terminal's own colour, readable on light and dark backgrounds alike.
    highlighted = Syntax(source, "python", theme="ansi_dark").highlight(source)
    highlighted.rstrip()
    return [Line(Text(INDENT) + line if line.plain else Text(), soft_wrap=True) for line in highlighted.split("\n")]
