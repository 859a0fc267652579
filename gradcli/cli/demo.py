"""`gradcli demo NAME`: short tutorials that run real torch code and show what it did.

A typer sub-app with one command per demo and its own options; `gradcli demo` alone lists
them. Blocks are shown as the demo produces them (a terminal sees it progress), each through
the text renderer like any result.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from typer.core import TyperGroup

from ..demos import NAMES
from ..errors import GradcliError, UsageError
from .app import EXIT_USAGE, JsonOption, PlotOption, app, reports_errors

BETA_LIMIT = 20.0  # beyond it σ(βx) saturates at the sample points and checks say little


class _Demos(TyperGroup):
    """Lists the demos in help order, and answers an unknown name with the list (exit 2)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            from ..demos import load

            try:
                load(args[0])
            except GradcliError as err:
                typer.echo(err.render(), err=True)
                ctx.exit(EXIT_USAGE)
        return super().resolve_command(ctx, args)


demo_app = typer.Typer(
    cls=_Demos, invoke_without_command=True, rich_markup_mode=None,
    help="Run a demo, or list them. Each prints the code it runs, then what it produced.\n\n"
    "Exit status: 0 when every check in the demo agreed, 1 when one failed (as the --buggy "
    "checks do, on purpose).\n\nExample:  gradcli demo swish --beta 1.5",
)
app.add_typer(demo_app, name="demo")


@demo_app.callback()
def demo_list(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        from ..demos import listing

        typer.echo("The demos (run one with `gradcli demo NAME`):\n" + listing())


@demo_app.command("swish")
@reports_errors
def swish_command(
    beta: Annotated[float, typer.Option("--beta", help="The β of x·σ(βx).")] = 1.0,
    buggy: Annotated[bool, typer.Option("--buggy", help="Also run the classic mistakes through the checks that catch them (exit 1).")] = False,
    plot: PlotOption = None,
    json: JsonOption = False,
) -> None:
    """Swish x·σ(βx) as a custom autograd.Function, checked against sympy, autograd and gradcheck.
    --plot draws Swish and its derivative for several β.

    Example:  gradcli demo swish --plot swish.png
    """
    import math

    if not math.isfinite(beta) or abs(beta) > BETA_LIMIT:
        raise UsageError(f"--beta {beta} is outside the demo's range: a finite β with |β| <= {BETA_LIMIT:g}")
    if plot is not None:
        from ..plot.swish import check_path

        check_path(plot)  # a bad suffix or missing matplotlib is refused before the demo runs
    ok = _run("swish", json, beta=beta, buggy=buggy)
    if plot is not None:
        from ..plot.swish import save_swish
        from .output import say

        save_swish(plot, beta)
        if not json:
            say(f"\npicture written to {plot}")
    raise typer.Exit(_status(ok))


def _plain_demo(name: str) -> None:
    """A demo without options; options meant for swish get a sentence saying so (exit 2)."""
    from ..demos import load

    @demo_app.command(name, help=load(name).SUMMARY,
                      context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
    @reports_errors
    def command(ctx: typer.Context, json: JsonOption = False) -> None:
        if ctx.args:
            others = ", ".join(n for n in NAMES if n != "swish")
            if "--plot" in ctx.args:
                raise UsageError(f"--plot belongs to `gradcli demo swish`, not to {name!r}")
            raise UsageError(f"--beta and --buggy belong to `gradcli demo swish`, not to {name!r} "
                             f"(the demos {others} take no options)")
        raise typer.Exit(_status(_run(name, json)))


def _run(name: str, json: bool = False, **options: Any) -> bool:
    """Run demo `name`: its blocks shown as they come and the summary, or with `json` only the
    closing document (the checks and their problems)."""
    from ..demos import run_demo
    from ..render.demo import spacing
    from .output import make_console, show, user_prints_aside, write

    console = make_console()
    previous: list[Any] = [None]

    def emit(block: Any) -> None:
        write(spacing(previous[0], block), console)
        show(block, "text", console)
        previous[0] = block

    if json:
        with user_prints_aside(True):
            run = run_demo(name, **options)
        show(run, "json")
    else:
        run = run_demo(name, emit=emit, **options)
        show(run, "text", console)
    return run.ok


def _status(ok: bool) -> int:
    from .output import exit_status

    return exit_status(ok)


for _name in NAMES:
    if _name != "swish":
        _plain_demo(_name)
