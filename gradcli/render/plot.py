"""`gradcli plot`'s report: the terminal picture (with --terminal), then what the plot shows.

PlotData in, `Line`s out (contract.py). The picture itself (png/svg/pdf) is plot/mpl.py's.
"""

from __future__ import annotations

from typing import Any

from .. import words
from ..plot.shades import derivative_label, shade_label
from .contract import Line

#: Terminal colour per role of a character cell (plot/terminal.py); none with NO_COLOR or a pipe.
STYLES = {
    "title": "bold", "axis": "dim", "f": "bold", "exact": "cyan", "autograd": "blue", "both": "bold blue",
    "unstable": "bold white on red", "nonfinite": "bold white on dark_orange", "overflow": "bold white on purple",
    "undefined": "black on grey70",
}


def plot_lines(data: Any, *, width: int, terminal: bool = False) -> list[Line]:
    out = _picture(data, width) if terminal else []
    fixed = "".join(f", {k} = {v:g}" for k, v in data.fixed.items())
    out.append(Line(f"{data.axis_source}: {data.x.size:,} points{fixed}, {data.dtype}"))
    for curve in data.curves:
        label = derivative_label(curve.order, data.variable)
        if curve.formula is not None:
            out.append(Line(f"{label} exact: {curve.formula}"))
        c = curve.comparison
        if c is not None and c.ok:
            out.append(Line(f"{label}: autograd agrees with the exact derivative at {c.points:,} points "
                            f"(max abs err {c.max_abs_err:.3g})"))
    for shade in data.shades:
        where = f"{data.variable} = {shade.first:.6g}" if shade.points == 1 else (
            f"{data.variable} from {shade.first:.6g} to {shade.last:.6g}")
        if shade.kind == "unstable":
            out.append(Line(f"{derivative_label(shade.order, data.variable)}: autograd gives {shade.got} for {where} where the "
                            f"exact value is {shade.exact} ({shade.points:,} points)"))
        else:
            out.append(Line(f"shaded, {shade_label(shade.kind, shade.order, data.variable)}: {where} "
                            f"({shade.points:,} points)"))
    if data.kinks:
        out.append(Line("kinks at " + ", ".join(f"{data.variable} = {k:g}" for k in data.kinks[:10])))
    out += [Line(f"note: {note}") for note in data.notes]
    out += [Line(text) for cause in data.causes for text in words.cause_lines(cause, rewrites=False)]
    return out


def _picture(data: Any, width: int) -> list[Line]:
    from rich.text import Text

    from ..plot.terminal import terminal_plot

    out = []
    for row in terminal_plot(data, width=width):
        text = Text()
        for segment, role in row:
            text.append(segment, style=STYLES.get(role, ""))
        out.append(Line(text, crop=True))
    return out + [Line("")]
