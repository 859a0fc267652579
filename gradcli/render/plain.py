"""A renderer's output as the plain text a pipe gets: what `str()` of a Python API result is.

The CLI writes a renderer's `Line`s on its console (cli/output.py); on a pipe that console is
100 columns wide and colourless. The Python API's results (gradcli/api.py) print the same text
from `str()`, so that a test's failure message and the command read alike: this module lays
the lines out on such a console, kept in memory, and returns the text instead of printing it.
"""

from __future__ import annotations

import io

from .contract import Output

# The width lives below the renderers: the demos (a floor down) narrow it for the code they run.
from ..widths import PLAIN_WIDTH, plain_width, width_now  # noqa: F401  (PLAIN_WIDTH, plain_width: re-exported)


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
