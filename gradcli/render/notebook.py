"""A result in a Jupyter notebook: a trace's graph drawn by Graphviz when it is installed, the
text report otherwise (what `Trace._repr_html_` shows); a check's, a function check's and a
grads report's text (without it Jupyter shows repr(), the dataclass's every field)."""

from __future__ import annotations

import html
import io
import shutil
import subprocess
from typing import Any

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


def trace_text(result: Any, width: int = 100) -> str:
    """The console report as plain text."""
    from rich.console import Console

    from .trace import trace_renderables

    console = Console(width=width, no_color=True, record=True, file=io.StringIO())
    for renderable in trace_renderables(result):
        console.print(renderable)
    return console.export_text()


def text_html(text: str) -> str:
    """A report a notebook shows as it is: the command's plain text in a <pre> block."""
    return f"<pre>{html.escape(text)}</pre>"


def trace_html(result: Any) -> str:
    """The SVG drawing above the problems, or the text report in a <pre> block."""
    svg = trace_svg(result)
    problems = "".join(f"<li>{html.escape(p)}</li>" for p in result.problems)
    listed = f"<p><b>Problems</b></p><ul>{problems}</ul>" if problems else ""
    if svg is not None:
        return f"<div>{svg}{listed}</div>"
    return text_html(trace_text(result))
