"""Draw a demo's blocks: headings, prose, highlighted code, and what the code produced.

Code is indented four spaces and output lines start with `#> ` (as reprex prints them), so
a block copied from the terminal, output included, still runs as Python. Colour and syntax
highlighting only on a terminal; plain text otherwise (see console.make_console).
"""

from __future__ import annotations

import textwrap
from typing import Any

from ..demos.runner import Block, Code, GraphDrawing, Heading, Prose, Shell, Verdict

INDENT = "    "
OUTPUT_PREFIX = "#> "
PROSE_WIDTH = 100  # long prose lines tire the eye even on a wide terminal
MAX_DRAWN_NODES = 60


class DemoPrinter:
    """Prints blocks as they arrive; a blank line between blocks, none between code and its verdict."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.previous: Block | None = None

    def __call__(self, block: Block) -> None:
        if self.previous is not None and not isinstance(block, Verdict) and not isinstance(self.previous, Heading):
            self.console.print()
        if isinstance(block, Heading) and self.previous is not None:
            self.console.print()
        render_block(self.console, block)
        self.previous = block


def render_block(console: Any, block: Block) -> None:
    """Print one block on a rich console."""
    from rich.text import Text

    if isinstance(block, Heading):
        console.rule(Text(block.text, style="bold cyan"), align="left", style="cyan")
    elif isinstance(block, Prose):
        width = min(console.width, PROSE_WIDTH)
        for line in textwrap.wrap(block.text, width):
            console.print(Text(line), soft_wrap=True)
    elif isinstance(block, Code):
        _print_code(console, block.source)
        if block.output:
            for line in output_lines(block.output, console.width):
                console.print(Text(line, style="green"), soft_wrap=True)
    elif isinstance(block, Verdict):
        mark, style = ("✓", "bold green") if block.ok else ("✗", "bold red")
        console.print(Text(f"{INDENT}{mark} {block.text}", style=style), soft_wrap=True)
    elif isinstance(block, GraphDrawing):
        from .graph_tree import graph_tree

        tree, _ = graph_tree(block.graph, block.title, max_nodes=MAX_DRAWN_NODES, source=block.source)
        _print_unpadded(console, tree)
    elif isinstance(block, Shell):
        console.print(Text(f"{INDENT}$ {block.text}", style="bold"), soft_wrap=True)
    else:  # pragma: no cover - a new block type must get its own branch
        raise TypeError(f"no renderer for {type(block).__name__}")


def render_summary(console: Any, verdicts: list[Verdict]) -> None:
    """The closing line: how many of the demo's checks agreed, and which failed."""
    from rich.text import Text

    console.print()
    failed = [v for v in verdicts if not v.ok]
    if not failed:
        console.print(Text(f"All {len(verdicts)} checks agreed.", style="bold green"))
        return
    console.print(Text(f"{len(failed)} of {len(verdicts)} checks failed:", style="bold red"))
    for verdict in failed:
        console.print(Text(f"{INDENT}✗ {verdict.text}", style="red"), soft_wrap=True)


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


def _print_unpadded(console: Any, renderable: Any) -> None:
    """Print indented, without the blanks rich pads each line with (they spoil copying)."""
    from rich.text import Text

    width = console.options.update_width(max(20, console.width - len(INDENT)))
    for segments in console.render_lines(renderable, width, pad=False):
        line = Text.assemble(INDENT, *((s.text, s.style) for s in segments if not s.control))
        line.rstrip()
        console.print(line if line.plain.strip() else Text(), soft_wrap=True)


def _print_code(console: Any, source: str) -> None:
    from rich.syntax import Syntax
    from rich.text import Text

    if console.no_color or not console.is_terminal:
        for line in source.splitlines():
            console.print(Text(f"{INDENT}{line}".rstrip()), soft_wrap=True)
        return
    # highlight() gives styled text without Syntax's padding to the full width, so copying
    # from the terminal gets no trailing blanks; ansi_dark leaves plain names in the
    # terminal's own colour, readable on light and dark backgrounds alike.
    highlighted = Syntax(source, "python", theme="ansi_dark").highlight(source)
    highlighted.rstrip()
    for line in highlighted.split("\n"):
        console.print(Text(INDENT) + line if line.plain else Text(), soft_wrap=True)
