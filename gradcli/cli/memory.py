"""`gradcli memory`: what backward keeps alive, by node, module and line, and which checkpoint
would pay."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .app import (DeviceOption, DtypeOption, InitOption, JsonOption, LibraryOption, LossInitOption, LossOption, PlotOption,
                  SeedOption, TargetArgument, VarOption, app, checked_plot, model_spec, reports_errors)


@app.command("memory")
@reports_errors
def memory_command(
    target: TargetArgument,
    var: VarOption = None,
    loss: LossOption = None,
    loss_init: LossInitOption = None,
    init: InitOption = None,
    depth: Annotated[Optional[int], typer.Option("--depth", metavar="N", help="Total every module deeper than N under its ancestor at depth N (default: every module its own row).")] = None,
    amp: Annotated[Optional[str], typer.Option("--amp", metavar="DTYPE", help="Run forward under torch.autocast in this dtype: bfloat16 or float16.")] = None,
    checkpoint: Annotated[int, typer.Option("--checkpoint", metavar="N", help="Prove checkpoint advice on the best N modules by rerunning with torch.utils.checkpoint (0: none).")] = 3,
    create_graph: Annotated[bool, typer.Option("--create-graph/--no-create-graph", help="Also run backward with create_graph=True and count what it saves (one more forward and backward).")] = True,
    top: Annotated[int, typer.Option("--top", metavar="N", help="List the N largest saved tensors in the text (the JSON has every one).")] = 12,
    plot: PlotOption = None,
    json: JsonOption = False,
    seed: SeedOption = None,
    dtype: DtypeOption = None,
    device: DeviceOption = "cpu",
    library: LibraryOption = None,
) -> None:
    """What backward keeps alive: every tensor autograd saves, by node, module and line of
    your code, against the measured peak; what retain_graph=True and create_graph=True would
    keep; and checkpoint advice proven by rerunning.

    One forward and backward on the --var inputs, watched with saved_tensors_hooks (your
    weights and .grad are not touched); then one with create_graph=True, and for the best
    --checkpoint modules a rerun with torch.utils.checkpoint, measured again, with the
    gradients compared bit for bit. Exit status 1 when backward raises or a checkpoint
    changes the gradients; 0 otherwise; 2 for bad input. --plot draws saved bytes by module,
    in forward order.

    Examples:

    \b
      gradcli memory examples/memory/mlp.py:MLP --var "x=randn(64, 256)" --loss "out.pow(2).mean()"
      gradcli memory examples/memory/mlp.py:DeepMLP --init depth=4 --var "x=randn(16, 128)" --loss "out.pow(2).mean()" --depth 2 --checkpoint 1 --json
      gradcli memory examples/memory/mlp.py:MLP --var "x=randn(64, 256)" --loss "out.pow(2).mean()" --amp bfloat16 --checkpoint 0
    """
    from ..footprint.run import PURPOSE, memory_of
    from ..targets.model import on_model
    from .output import exit_status, say, show, user_prints_aside

    if depth is not None and depth < 0:
        raise UsageError("--depth must be 0 or more")
    if checkpoint < 0:
        raise UsageError("--checkpoint must be 0 or more")
    if top < 0:
        raise UsageError("--top must be 0 or more")
    checked_plot(plot)
    spec = model_spec(target, var, init, loss, loss_init, seed, device, dtype, library)
    with user_prints_aside(json):
        result = on_model(
            memory_of, spec, purpose=PURPOSE, tag_loss=True, depth=depth, amp=amp, checkpoint=checkpoint, create_graph=create_graph,
        )
    if plot is not None:
        from ..plot.memory import save_memory

        save_memory(result, plot, depth)
    show(result, "json" if json else "text", depth=depth, top=top)
    if plot is not None and not json:
        say(f"\nPlot written to {plot}")
    raise typer.Exit(exit_status(result.ok))
