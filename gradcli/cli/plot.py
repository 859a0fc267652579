"""`gradcli plot`: f, autograd's derivative and the exact one, and their gap, as a picture."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import UsageError
from .app import (
    EXIT_OK,
    EXIT_PROBLEM,
    DtypeOption,
    LibraryOption,
    SeedOption,
    VarOption,
    app,
    read_expression,
    reports_errors,
)

#: Terminal colour per role of a character cell (plot/terminal.py); none with NO_COLOR or a pipe.
STYLES = {
    "title": "bold", "axis": "dim", "f": "bold", "exact": "cyan", "autograd": "blue", "both": "bold blue",
    "unstable": "bold white on red", "nonfinite": "bold white on dark_orange", "overflow": "bold white on purple",
    "undefined": "black on grey70",
}


@app.command("plot")
@reports_errors
def plot_command(
    expr: Annotated[str, typer.Argument(metavar="EXPR", help="An elementwise expression of one variable; @FILE reads a file, - reads stdin.")],
    var: VarOption = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", metavar="PATH", help="Write the picture to PATH: .png, .svg or .pdf (needs matplotlib: pip install 'gradcli[plot]').")] = None,
    order: Annotated[int, typer.Option("--order", help="1: f and its derivative; 2: the second derivative too.")] = 1,
    terminal: Annotated[bool, typer.Option("--terminal", help="Draw a coarse plot in the terminal (no file, no matplotlib needed).")] = False,
    seed: SeedOption = None,
    dtype: DtypeOption = "float64",
    library: LibraryOption = None,
) -> None:
    """Plot f, autograd's derivative and sympy's exact one, and |autograd - exact| (log scale).

    The x axis is the one variable given a range (default: linspace(-5, 5, 1001), or a
    library function's domain); other variables are held at one value each. Shaded: x
    ranges outside the domain, where autograd is wrong (against the exact derivative, at
    50 digits where float64 is in doubt), where the value is beyond the float range, and
    where f is not finite. Exit status 1 when autograd is wrong somewhere, 2 for bad input.

    Examples:

    \b
      gradcli plot "log(1+exp(x))" --var "x=linspace(-800,800,2001)" -o softplus.png   # exit 1
      gradcli plot "x*sigmoid(x)" --order 2 -o swish.svg
      gradcli plot "relu(x) + sqrt(x)" --terminal
    """
    if output is None and not terminal:
        raise UsageError("plot needs somewhere to draw", hint="give -o out.png (or .svg/.pdf), or --terminal")
    if output is not None:
        from ..plot.mpl import picture_format, require_matplotlib

        picture_format(output)  # refuse a bad suffix or missing matplotlib before any work
        require_matplotlib()
    from ..plot.data import plot_data

    data = plot_data(read_expression(expr), var or (), order=order, dtype=dtype, seed=seed,
                     library_dirs=library or ())
    if output is not None:
        from ..plot.mpl import save

        save(data, output)
    _report(data, output, terminal)
    raise typer.Exit(EXIT_OK if data.ok else EXIT_PROBLEM)


def _report(data: Any, output: Optional[Path], terminal: bool) -> None:
    from rich.text import Text

    from ..plot.shades import derivative_label
    from ..plot.terminal import terminal_plot
    from ..render.console import make_console

    console = make_console()
    if terminal:
        for line in terminal_plot(data, width=console.width):
            text = Text()
            for segment, role in line:
                text.append(segment, style=STYLES.get(role, ""))
            console.print(text, overflow="crop", no_wrap=True)
        console.print()
    fixed = "".join(f", {k} = {v:g}" for k, v in data.fixed.items())
    console.print(f"{data.axis_source}: {data.x.size:,} points{fixed}, {data.dtype}")
    for curve in data.curves:
        label = derivative_label(curve.order, data.variable)
        if curve.formula is not None:
            console.print(f"{label} exact: {curve.formula}")
        c = curve.comparison
        if c is not None and c.ok:
            console.print(f"{label}: autograd agrees with the exact derivative at {c.points:,} points "
                          f"(max abs err {c.max_abs_err:.3g})")
    for shade in data.shades:
        where = f"{data.variable} = {shade.first:.6g}" if shade.points == 1 else (
            f"{data.variable} from {shade.first:.6g} to {shade.last:.6g}")
        if shade.kind == "unstable":
            label = derivative_label(shade.order, data.variable)
            console.print(f"{label}: autograd gives {shade.got} for {where} where the exact value is "
                          f"{shade.exact} ({shade.points:,} points)")
        else:
            from ..plot.shades import shade_label

            console.print(f"shaded, {shade_label(shade.kind, shade.order, data.variable)}: {where} ({shade.points:,} points)")
    if data.kinks:
        console.print("kinks at " + ", ".join(f"{data.variable} = {k:g}" for k in data.kinks[:10]))
    for note in data.notes:
        console.print(f"note: {note}")
    if output is not None:
        console.print(f"picture written to {output}")
