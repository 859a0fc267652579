"""A renderer's output as the plain text a pipe gets: what `str()` of a Python API result is,
and what a Jupyter notebook shows of it (that text in a <pre> block; a trace's graph drawn by
Graphviz above its problems when Graphviz is installed).

The CLI writes a renderer's `Line`s on its console (cli/output.py); on a pipe that console is
100 columns wide and colourless. The Python API's results (gradcli/api.py) print the same text
from `str()`, so that a test's failure message and the command read alike: this module lays
the lines out on such a console, kept in memory, and returns the text instead of printing it.
"""

from __future__ import annotations

import html
import io
import shutil
import subprocess
from typing import Any

# The width lives below the renderers: the demos (a floor down) narrow it for the code they run.
from ..widths import PLAIN_WIDTH, plain_width, width_now  # noqa: F401  (PLAIN_WIDTH, plain_width: re-exported)
from .contract import Output


def plain_text(output: Output, width: int | None = None) -> str:
    """`output` (a renderer's text or `Line`s) as the CLI prints it on a pipe, without the
    final newline: every line laid out as cli/output.py's `write` lays it out, at `width`
    (by default PLAIN_WIDTH, or the `plain_width` block's)."""
    width = width_now() if width is None else width
    if isinstance(output, str):
        return output.removesuffix("\n")
    from rich.console import Console

    # Not a terminal, so rich writes no escape codes: the text a pipe gets.
    file = io.StringIO()
    console = Console(file=file, width=width, no_color=True, highlight=False, soft_wrap=False, emoji=False)
    for line in output:
        console.print(line.item, style=line.style, soft_wrap=line.soft_wrap, markup=False,
                      **({"overflow": "crop", "no_wrap": True} if line.crop else {}))
    return file.getvalue().removesuffix("\n")


# -- the notebook view (`_repr_html_` of gradcli/api.py's results) ---------------------------------
#: Seconds Graphviz may take to lay out a graph for a notebook cell before the text is shown.
LAYOUT_TIMEOUT = 30
#: Larger graphs are shown as text: Graphviz's layout time grows quickly with size.
MAX_DRAWN_NODES = 2000


def trace_svg(result: Any) -> str | None:
    """The graph as SVG text, or None without Graphviz (or for a graph too large to lay out)."""
    from .dot import trace_dot

    program = shutil.which("dot")
    if program is None or len(result.graph.nodes) > MAX_DRAWN_NODES:
        return None
    try:
        finished = subprocess.run(
            [program, "-Tsvg"], input=trace_dot(result).encode("utf-8"), capture_output=True,
            timeout=LAYOUT_TIMEOUT, check=False,
        )
    except (subprocess.TimeoutExpired, OSError):
        return None
    return finished.stdout.decode("utf-8") if finished.returncode == 0 else None


def text_html(text: str) -> str:
    """A report a notebook shows as it is: the command's plain text in a <pre> block."""
    return f"<pre>{html.escape(text)}</pre>"


def trace_html(result: Any, text: str) -> str:
    """The SVG drawing above the problems, or `text` (the text format's report) in a <pre> block."""
    from ..words import problem_sentences

    svg = trace_svg(result)
    problems = "".join(f"<li>{html.escape(p)}</li>" for p in problem_sentences(result.problems))
    listed = f"<p><b>Problems</b></p><ul>{problems}</ul>" if problems else ""
    if svg is not None:
        return f"<div>{svg}{listed}</div>"
    return text_html(text)
