"""`gradcli diverge`: one training script run under two setups side by side, and where they part."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..errors import UsageError
from .app import PlotOption, app, reports_errors


@app.command(
    "diverge",
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)
@reports_errors
def diverge_command(
    command: Annotated[Optional[List[str]], typer.Argument(
        metavar="SCRIPT",
        help="The training script and its own arguments, as you would give them to python (with -m: the module's arguments).")] = None,
    module: Annotated[Optional[str], typer.Option("-m", metavar="MODULE", help="Run a module as `python -m MODULE` would.")] = None,
    a: Annotated[str, typer.Option("--a", metavar="SETUP", help="The first run's setup (default: the script as written).")] = "same",
    b: Annotated[str, typer.Option("--b", metavar="SETUP", help="The second run's setup: same, float64, compile[:BACKEND], autocast:bfloat16|float16, deterministic, ranks:N (torchrun), python:PATH.")] = "same",
    steps: Annotated[Optional[int], typer.Option("--steps", metavar="N", help="Stop both runs after N optimizer steps (default: the script's own end).")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", metavar="PATH", help="Write the result as JSON to PATH (docs/json.md, diverge).")] = None,
    plot: PlotOption = None,
) -> None:
    """Run a training script twice, side by side, under two setups (--a, --b), and find the
    first optimizer step where the runs part: in the data (other batches), the forward (another
    loss), the backward (other gradients) or the update (other weights), then the module and
    the line, and why. A difference is judged against a band measured from the script's own
    float32 rounding (a float64 run beside it, step by step), scaled to the pair's precision.

    The script runs unchanged, as `python SCRIPT ARGS` would; gradcli seeds nothing, so a
    script that is not reproducible shows it. gradcli's options come before the script.
    A run that reaches a step `gradcli watch` would stop (a nan or inf loss or gradient) ends
    there and is reported in watch's words. The header gives each run's torch version, the end
    the recorder's measured cost per step.
    Exit status: 0 the runs stay within the band, 1 they part or one is stopped, 2 a run could
    not be run.
    --plot draws both losses and each parameter's gradient distance in bands over the steps.

    Examples:

    \b
      gradcli diverge --b float64 examples/diverge/train.py --steps 2
      gradcli diverge --b same examples/diverge/train.py --steps 2 --unseeded       # exit 1
      gradcli diverge --b autocast:float16 examples/diverge/train.py --steps 3 --bad-batch 2   # exit 1
    """
    from ..divergence.run import diverge
    from ..divergence.setups import parse_setup
    from ..watcher.script import Script
    from .output import exit_status, say, show

    args = list(command or [])
    if module is None and not args:
        raise UsageError("gradcli diverge needs a script (gradcli diverge --b SETUP train.py [ARGS...]) or a module (-m package.module)")
    if steps is not None and steps < 1:
        raise UsageError(f"--steps {steps}: give at least 1 step")
    script = Script(None, module, tuple(args)) if module is not None else Script(args[0], None, tuple(args[1:]))
    if plot is not None:
        from ..plot.mpl import picture_format, require_matplotlib

        picture_format(plot)  # a wrong suffix or missing matplotlib is a usage error before any run
        require_matplotlib()
    result = diverge(script, parse_setup(a, "--a"), parse_setup(b, "--b"), steps=steps)
    if json_path is not None:
        from ..render.formats import render

        json_path.write_text(str(render(result, "json")) + "\n", encoding="utf-8")
    if plot is not None:
        from ..plot.diverge import draw_diverge

        draw_diverge(result, plot)
    show(result)
    if plot is not None:
        say(f"picture written to {plot}")
    raise typer.Exit(exit_status(result.ok))
