"""`gradcli compare` (distributed part only, on this branch): the options `grads` shares plus
--ddp/--fsdp; all the work is in cli/distributed.py. The compare command of issue 26 takes
these options over at merge."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from .app import DeviceOption, JsonOption, LibraryOption, SeedOption, VarOption, app, reports_errors
from .distributed import DdpOption, DistributedOptions, FsdpOption, TimeoutOption, compare_ranks


@app.command("compare")
@reports_errors
def compare_command(
    target: Annotated[str, typer.Argument(metavar="TARGET", help="Your model: path/to/model.py:NAME or package.module:NAME (importing it runs it, as python would).")],
    var: VarOption = None,
    loss: Annotated[Optional[str], typer.Option("--loss", metavar="EXPR", help="Reduce the output to the loss: an expression in which out and the --var inputs are bound, e.g. '((out - y)**2).mean()'.")] = None,
    init: Annotated[Optional[List[str]], typer.Option("--init", metavar="KEY=VALUE", help="A keyword argument for the nn.Module class or model factory (a Python literal). Repeatable.")] = None,
    ddp: DdpOption = None,
    fsdp: FsdpOption = None,
    timeout: TimeoutOption = 600.0,
    json: JsonOption = False,
    seed: SeedOption = None,
    device: DeviceOption = "cpu",
    library: LibraryOption = None,
) -> None:
    """Compare the model's gradients in another setup with the plain one-process run: on N
    processes of torch.distributed (--ddp N, --fsdp N), parameter by parameter and rank by
    rank, with the causes of a difference proven by rerunning with their fix.

    Exit status 1 when a reduced gradient differs from one process or between ranks; 0 when
    every one agrees; 2 for bad input or a rank that raised.

    Examples:

    \b
      gradcli compare examples/distributed/models.py:WithBatchNorm --var "x=randn(16, 8)" --loss "out.pow(2).mean()" --ddp 2  # exit 1
    """
    options = DistributedOptions(target, var or (), init or (), loss, seed, json, ddp, fsdp, device, library or (), timeout)
    raise typer.Exit(compare_ranks(options))
