"""`--ddp N` / `--fsdp N` on `compare` and `grads`: every line of CLI work the distributed runs
need, in one function per command that takes the parsed options and returns the exit status
(the commands' own modules only add the options and call these)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Annotated, Any, Optional

import typer

from ..errors import UsageError

DdpOption = Annotated[Optional[int], typer.Option("--ddp", metavar="N", help="Run the model on N processes under DistributedDataParallel (torch.distributed: gloo on CPU, nccl with --device cuda; under torchrun, its ranks) and compare the reduced gradients with one process on the whole batch.")]
FsdpOption = Annotated[Optional[int], typer.Option("--fsdp", metavar="N", help="As --ddp, with FSDP2 (fully_shard): the sharded gradients are gathered (DTensor.full_tensor) to compare.")]
AccumulateOption = Annotated[int, typer.Option("--accumulate", metavar="K", help="Gradient accumulation (--ddp/--fsdp): each rank runs its shard as K micro-batches, the first K-1 under no_sync (FSDP2: set_requires_gradient_sync(False)), backward after each, as your training loop does.")]
ClipOption = Annotated[Optional[float], typer.Option("--clip-grad-norm", metavar="MAX", help="After backward, torch.nn.utils.clip_grad_norm_(model.parameters(), MAX) on every rank and on the one process (--ddp/--fsdp): the clipped gradients are compared.")]
BeforeStepOption = Annotated[Optional[str], typer.Option("--before-step", metavar="FILE:NAME", help="Your own code between backward and optimizer.step (clipping, say), called as NAME(model) on every rank and on the one process (--ddp/--fsdp).")]
TimeoutOption = Annotated[float, typer.Option("--timeout", metavar="SECONDS", help="End the ranks (with an error, exit 2) if a run on them takes longer (--ddp/--fsdp).")]


@dataclass
class DistributedOptions:
    """What the command line said about a distributed run: the model options' one record
    (cli/app.py's `model_spec`) and the ranks' own options."""

    model: Any  # targets/spec.py's ModelSpec
    json: bool = False
    ddp: int | None = None
    fsdp: int | None = None
    timeout: float = 600.0
    accumulate: int = 1
    clip: float | None = None
    before_step: str | None = None
    grads: dict[str, Any] = field(default_factory=dict)  # grads' own options (thresholds, strict) for grads --ddp

    @property
    def wrap(self) -> str:
        return "fsdp" if self.fsdp is not None else "ddp"

    @property
    def world(self) -> int:
        if self.ddp is not None and self.fsdp is not None:
            raise UsageError("--ddp and --fsdp are two ways to run the ranks: give one of them")
        n = self.fsdp if self.fsdp is not None else self.ddp
        if n is None:
            raise UsageError("give --ddp N or --fsdp N: the setup to compare with one process",
                             hint="--ddp 2 runs the model on two processes under DistributedDataParallel")
        return n


def wanted(ddp: int | None, fsdp: int | None) -> bool:
    return ddp is not None or fsdp is not None


def _setup(options: DistributedOptions) -> Any:
    from ..distributed.run import make_setup

    if options.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {options.timeout:g}")
    return make_setup(options.model, wrap=options.wrap, world=options.world,  # type: ignore[arg-type]
                      accumulate=options.accumulate, clip=options.clip, before_step=options.before_step)


def compare_ranks(options: DistributedOptions) -> int:
    """`gradcli compare TARGET --ddp N` / `--fsdp N`: the exit status (1: a gradient differs)."""
    from ..distributed.run import compare_distributed
    from .output import exit_status, show, user_prints_aside

    setup = _setup(options)
    with user_prints_aside(options.json):
        result = compare_distributed(setup, timeout=options.timeout)
    if _rank() == 0:  # under torchrun every rank has the result; one prints it
        show(result, "json" if options.json else "text")
    return exit_status(result.ok)


def grads_ranks(options: DistributedOptions) -> int:
    """`gradcli grads TARGET --ddp N`: the health table of the reduced gradients, and the
    parameters whose ranks disagree."""
    from ..distributed.grads import grads_distributed
    from .output import exit_status, show, user_prints_aside

    if options.fsdp is not None:
        raise UsageError("grads takes --ddp N; for FSDP2 use gradcli compare TARGET --fsdp N")
    setup = _setup(options)
    with user_prints_aside(options.json):
        result = grads_distributed(setup, timeout=options.timeout, **options.grads)
    if _rank() == 0:
        show(result, "json" if options.json else "text")
    return exit_status(result.ok)


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))
