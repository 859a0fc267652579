"""`gradcli grads`: gradient health of every parameter of a model, with an exit status for CI."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import UsageError
from ..health.thresholds import Thresholds
from .app import (DeviceOption, DtypeOption, InitOption, JsonOption, LibraryOption, LossInitOption, LossOption, PlotOption,
                  SeedOption, TargetArgument, VarOption, app, checked_plot, model_spec, reports_errors)
from .distributed import DdpOption, DistributedOptions, TimeoutOption, grads_ranks


@app.command("grads")
@reports_errors
def grads_command(
    target: TargetArgument,
    var: VarOption = None,
    loss: LossOption = None,
    loss_init: LossInitOption = None,
    init: InitOption = None,
    depth: Annotated[Optional[int], typer.Option("--depth", metavar="N", help="Summarise every module deeper than N in one row (default: every module its own group).")] = None,
    steps: Annotated[int, typer.Option("--steps", metavar="N", help="Also run N plain SGD steps on the same batch, on a copy of the model, and show each gradient norm across them.")] = 0,
    lr: Annotated[Optional[float], typer.Option("--lr", metavar="LR", help="The learning rate of --steps (default 0.01).")] = None,
    plot: PlotOption = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 on ZERO, VANISHING and EXPLODING too, not only on NO GRAD and NONFINITE.")] = False,
    vanish: Annotated[float, typer.Option("--vanish", metavar="X", help="VANISHING below this ‖grad‖/‖param‖.")] = Thresholds.vanish,
    explode: Annotated[float, typer.Option("--explode", metavar="X", help="EXPLODING above this ‖grad‖/‖param‖.")] = Thresholds.explode,
    spread: Annotated[float, typer.Option("--spread", metavar="F", help="Also flag a ratio more than F times below or above the model's median.")] = Thresholds.spread,
    json: JsonOption = False,
    seed: SeedOption = None,
    dtype: DtypeOption = None,
    device: DeviceOption = "cpu",
    library: LibraryOption = None,
    ddp: DdpOption = None,
    timeout: TimeoutOption = 600.0,
) -> None:
    """Gradient health of every parameter of a model: which get no gradient and why, which
    are zero, non-finite, vanishing or exploding.

    One forward and backward on the --var inputs (your weights and .grad are not touched);
    one row per parameter in the order forward used them, grouped by module. Exit status 1
    when a parameter that should learn gets no gradient (NO GRAD) or a nan/inf one
    (NONFINITE), and with --strict also on ZERO, VANISHING or EXPLODING; 0 otherwise; 2 for
    bad input. Frozen parameters (requires_grad=False) are listed apart and never fail.
    --plot draws mean and max |grad| per layer (log scale).

    Examples:

    \b
      gradcli grads examples/grads/healthy.py:MLP --var "x=randn(64, 32)" --loss "out.pow(2).mean()"
      gradcli grads examples/grads/faults.py:DetachedBranch --var "x=randn(16, 8)" --loss "out.pow(2).mean()"  # exit 1
      gradcli grads examples/grads/faults.py:DeadReLU --var "x=randn(16, 8)" --loss "out.pow(2).mean()" --strict  # exit 1
      gradcli grads examples/grads/faults.py:DeepMLP --init std=1.5 --var "x=randn(64, 64)" --loss "out.pow(2).mean()" --depth 1 --steps 3  # exit 1
    """
    from ..health.run import PURPOSE, grads_of
    from ..targets.model import on_model
    from .output import exit_status, say, show, user_prints_aside

    if lr is not None and not steps:
        raise UsageError("--lr is the learning rate of --steps: give --steps N with it")
    if depth is not None and depth < 0:
        raise UsageError("--depth must be 0 or more")
    checked_plot(plot)
    spec = model_spec(target, var, init, loss, loss_init, seed, device, dtype, library)
    if ddp is not None:
        if steps or plot is not None or dtype is not None:
            raise UsageError("--ddp judges one step's reduced gradients: leave out --steps, --plot and --dtype with it")
        if loss_init:  # it was dropped without a word before
            raise UsageError("--loss-init does not reach the ranks yet: give --ddp a --loss expression")
        options = DistributedOptions(spec, json, ddp, None, timeout, grads=dict(vanish=vanish, explode=explode, spread=spread, strict=strict, depth=depth))
        raise typer.Exit(grads_ranks(options))
    with user_prints_aside(json):
        result = on_model(
            grads_of, spec, purpose=PURPOSE, steps=steps, lr=0.01 if lr is None else lr, vanish=vanish, explode=explode, spread=spread, strict=strict, depth=depth,
        )
    if plot is not None:
        from ..plot.grads import save_grads

        save_grads(result, plot)
    show(result, "json" if json else "text")
    if plot is not None and not json:
        say(f"\nPlot written to {plot}")
    raise typer.Exit(exit_status(result.ok))
