"""`gradcli demo [NAME]`: short tutorials that run real torch code and show what it did."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .app import EXIT_OK, EXIT_PROBLEM, app, reports_errors

BETA_LIMIT = 20.0  # beyond it σ(βx) saturates at the sample points and checks say little


@app.command("demo")
@reports_errors
def demo_command(
    name: Annotated[Optional[str], typer.Argument(help="The demo to run; leave out to list them.")] = None,
    beta: Annotated[Optional[float], typer.Option("--beta", help="swish: the β of x·σ(βx) (default 1.0).")] = None,
    buggy: Annotated[bool, typer.Option("--buggy", help="swish: also run the classic mistakes through the checks that catch them (exit 1).")] = False,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="PATH", help="swish: also draw Swish and its derivative for several β to PATH (.png, .svg or .pdf; needs matplotlib: pip install 'gradcli[plot]').")] = None,
) -> None:
    """Run a demo, or list them. Each prints the code it runs, then what it produced.

    Exit status: 0 when every check in the demo agreed, 1 when one failed (as the
    --buggy checks do, on purpose).

    Example:  gradcli demo swish --beta 1.5

    Example:  gradcli demo swish --plot swish.png
    """
    from ..demos import NAMES, listing, load

    if name is None:
        typer.echo("The demos (run one with `gradcli demo NAME`):\n" + listing())
        return
    load(name)  # an unknown name is a UsageError listing the demos
    options = {}
    if name == "swish":
        options = {"beta": _checked_beta(1.0 if beta is None else beta), "buggy": buggy}
    elif beta is not None or buggy:
        others = ", ".join(n for n in NAMES if n != "swish")
        raise UsageError(f"--beta and --buggy belong to `gradcli demo swish`, not to {name!r} (the demos {others} take no options)")
    if plot is not None:
        from ..plot.swish import check_path, save_swish

        if name != "swish":
            raise UsageError(f"--plot belongs to `gradcli demo swish`, not to {name!r}")
        check_path(plot)  # a bad suffix or missing matplotlib is refused before the demo runs
    ok = _run(name, options)
    if plot is not None:
        save_swish(plot, options["beta"])
        typer.echo(f"\npicture written to {plot}")
    raise typer.Exit(EXIT_OK if ok else EXIT_PROBLEM)


def _checked_beta(beta: float) -> float:
    import math

    if not math.isfinite(beta) or abs(beta) > BETA_LIMIT:
        raise UsageError(f"--beta {beta} is outside the demo's range: a finite β with |β| <= {BETA_LIMIT:g}")
    return beta


def _run(name: str, options: dict) -> bool:
    from ..demos import run_demo
    from ..render.console import make_console
    from ..render.demo import DemoPrinter, render_summary

    console = make_console()
    result = run_demo(name, emit=DemoPrinter(console), **options)
    render_summary(console, result.verdicts)
    return result.ok
