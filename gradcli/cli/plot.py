"""`gradcli plot`: f, autograd's derivative and the exact one, and their gap, as a picture."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .app import (
    DtypeOption,
    JsonOption,
    LibraryOption,
    SeedOption,
    VarOption,
    app,
    read_expression,
    reports_errors,
)

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
    json: JsonOption = False,
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
    if output is None and not terminal and not json:
        raise UsageError("plot needs somewhere to draw", hint="give -o out.png (or .svg/.pdf), or --terminal (or --json)")
    if output is not None:
        from ..plot.mpl import picture_format, require_matplotlib

        picture_format(output)  # refuse a bad suffix or missing matplotlib before any work
        require_matplotlib()
    from ..plot.data import plot_data

    from .output import exit_status, say, show

    data = plot_data(read_expression(expr), var or (), order=order, dtype=dtype, seed=seed,
                     library_dirs=library or ())
    if output is not None:
        from ..plot.mpl import save

        save(data, output)
    show(data, "json" if json else "text", terminal=terminal)
    if output is not None and not json:
        say(f"picture written to {output}")
    raise typer.Exit(exit_status(data.ok))
