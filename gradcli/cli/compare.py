"""`gradcli compare`: a training setup's gradients against the eager float32 reference."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .app import (DeviceOption, DtypeOption, InitOption, JsonOption, LibraryOption, LossInitOption, LossOption, PlotOption,
                  SeedOption, TargetArgument, VarOption, app, checked_plot, model_spec, reports_errors)
from .distributed import (AccumulateOption, BeforeStepOption, ClipOption, DdpOption, DistributedOptions, FsdpOption,
                          TimeoutOption, compare_ranks, wanted)


@app.command("compare")
@reports_errors
def compare_command(
    target: TargetArgument,
    var: VarOption = None,
    loss: LossOption = None,
    loss_init: LossInitOption = None,
    init: InitOption = None,
    compile: Annotated[bool, typer.Option("--compile", help="The candidate runs under torch.compile.")] = False,
    backend: Annotated[str, typer.Option("--backend", help="torch.compile's backend: inductor (needs a C++ compiler), aot_eager or eager.")] = "inductor",
    mode: Annotated[Optional[str], typer.Option("--mode", help="torch.compile's mode: default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs.")] = None,
    amp: Annotated[Optional[str], typer.Option("--amp", metavar="DTYPE", help="The candidate runs under torch.autocast in bfloat16 or float16 (weights stay float32).")] = None,
    scaler: Annotated[bool, typer.Option("--scaler", help="With --amp float16: GradScaler's own loop (skip and back off on overflow); the scale it settles on is shown.")] = False,
    dtype: DtypeOption = None,
    reference: Annotated[str, typer.Option("--reference", metavar="DTYPE", help="The reference's precision: float32 (default) or float64.")] = "float32",
    ddp: DdpOption = None,
    fsdp: FsdpOption = None,
    timeout: TimeoutOption = 600.0,
    accumulate: AccumulateOption = 1,
    clip_grad_norm: ClipOption = None,
    before_step: BeforeStepOption = None,
    plot: PlotOption = None,
    json: JsonOption = False,
    seed: SeedOption = None,
    device: DeviceOption = "cpu",
    library: LibraryOption = None,
) -> None:
    """Your training setup's gradients against the plain model's: torch.compile, autocast,
    GradScaler, half-precision weights, or N processes of torch.distributed (--ddp N, --fsdp N).

    The reference is the model run eagerly in float32 (--reference float64), the candidate
    the same model, weights, batch and generator state under the options given; both run on
    copies (your weights, .grad and BatchNorm statistics are not touched). Per parameter: the
    relative and max error against a tolerance from the candidate's precision and the
    reduction's length, and a flag (AGREES, DIFFERS, UNDERFLOW, OVERFLOW, MISSING); when
    something differs, the first module in backward order where it starts, and why, from
    reruns. With --ddp N or --fsdp N the candidate is the model on N processes (gloo on CPU),
each on its shard of the batch, against one process on the whole batch, rank by rank.
Exit status 0 all agree, 1 a parameter differs, 2 bad input (or a rank that raised).
    --plot draws the relative error per layer (log scale) with its tolerance band.

    Examples:

    \b
      gradcli compare examples/compare/models.py:MLP --var "x=randn(16, 32)" --loss "out.pow(2).mean()" --amp bfloat16
      gradcli compare examples/compare/models.py:MLP --var "x=randn(16, 32)" --loss "out.pow(2).mean()" --amp float16 --scaler
      gradcli compare examples/compare/models.py:MLP --var "x=randn(16, 32)" --loss "1e-7 * out.pow(2).mean()" --amp float16  # exit 1
      gradcli compare examples/distributed/models.py:WithBatchNorm --var "x=randn(16, 8)" --loss "out.pow(2).mean()" --ddp 2  # exit 1
      gradcli compare examples/distributed/models.py:MLP --var "x=randn(16, 8)" --loss "out.pow(2).mean()" --ddp 2 --accumulate 4  # exit 1
    """
    from ..comparison.setup import Setup
    from ..comparison.run import PURPOSE, compare_of
    from ..targets.model import on_model
    from .output import exit_status, say, show, user_prints_aside

    if wanted(ddp, fsdp):
        given = [name for name, on in (("--compile", compile), ("--amp", amp), ("--scaler", scaler), ("--dtype", dtype),
                                       ("--plot", plot), ("--reference", reference != "float32")) if on]
        if given:
            raise UsageError(f"{given[0]} with --ddp/--fsdp is not supported: the distributed run is compared in float32",
                             hint="compare the setup and the distribution in two runs")
        if loss_init:
            raise UsageError("--loss-init does not reach the ranks yet: give --ddp/--fsdp a --loss expression")
        # --dtype is the candidate's here (a compare option), never the model's
        options = DistributedOptions(model_spec(target, var, init, loss, loss_init, seed, device, None, library), json, ddp, fsdp,
                                     timeout, accumulate, clip_grad_norm, before_step)
        raise typer.Exit(compare_ranks(options))
    alone = [name for name, on in (("--accumulate", accumulate != 1), ("--clip-grad-norm", clip_grad_norm is not None),
                                   ("--before-step", before_step is not None)) if on]
    if alone:
        raise UsageError(f"{alone[0]} is a step of a distributed run: give it with --ddp N or --fsdp N",
                         hint="e.g. --ddp 2 " + alone[0] + " ...")
    if device != "cpu":
        raise UsageError("compare without --ddp/--fsdp runs on the CPU", hint="--device chooses the ranks' device with --ddp N")
    setup = Setup(compile=compile, backend=backend, mode=mode, amp=amp, scaler=scaler, dtype=dtype, reference=reference)  # type: ignore[arg-type]
    checked_plot(plot)
    spec = model_spec(target, var, init, loss, loss_init, seed, device, None, library)  # --dtype: the candidate's
    with user_prints_aside(json):
        setup.check_machine()  # before the user's module is imported and built
        result = on_model(compare_of, spec, purpose=PURPOSE, setup=setup)
    if plot is not None:
        from ..plot.compare import save_compare

        save_compare(result, plot)
    show(result, "json" if json else "text")
    if plot is not None and not json:
        say(f"\nPlot written to {plot}")
    raise typer.Exit(exit_status(result.ok))
