"""`compare --ddp N` / `--fsdp N`: start the ranks, run the user's model on them, compare with
the one-process reference, and prove the causes by rerunning with fixes on the same ranks."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Sequence

import torch

from ..errors import UsageError
from .causes import prove, suspects
from .judge import judge
from .launch import TIMEOUT, Ranks, start_ranks
from .reference import Reference, reference
from .result import Comparison, DistributedResult
from .setup import Fix, Setup, Wrap
from .worker import job

#: The most ranks spawned on one machine (each imports torch: ~0.4 GB and seconds).
MAX_SPAWNED = 16


def make_setup(target: str, variables: Sequence[str] = (), *, loss: str | None = None, init: Sequence[str] = (),
               seed: int | None = None, library_dirs: Sequence[str] = (), wrap: Wrap = "ddp", world: int = 2,
               device: str = "cpu") -> Setup:
    """The run's plain description, checked before any rank starts."""
    from .launch import under_torchrun

    if world < 2 and not under_torchrun():
        raise UsageError(f"--{wrap} needs 2 or more ranks, not {world}", hint=f"--{wrap} 2 compares two ranks with one process")
    if world > MAX_SPAWNED and not under_torchrun():
        raise UsageError(f"--{wrap} {world}: at most {MAX_SPAWNED} ranks are started on one machine",
                         hint="for more, launch gradcli under torchrun --nproc-per-node/--nnodes")
    if device.startswith("cuda") and torch.cuda.device_count() < (1 if under_torchrun() else world):
        raise UsageError(f"--device cuda with {world} ranks needs {world} GPUs; this machine has {torch.cuda.device_count()}",
                         hint="leave out --device to run the ranks on the CPU (backend gloo)")
    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
    return Setup(target, tuple(variables), loss, tuple(init), seed, tuple(str(d) for d in library_dirs), wrap, world, device)


def compare_distributed(setup: Setup, *, timeout: float = TIMEOUT, ranks: Ranks | None = None) -> DistributedResult:
    """The user's model on `setup.world` ranks against one process, with causes proven.
    `ranks`: a group already running (tests share one), else one is started and torn down."""
    with contextlib.ExitStack() as stack:
        if ranks is None:
            ranks = stack.enter_context(start_ranks(setup.world, setup.backend, timeout))
        setup = replace(setup, seed=ranks.agree(setup.seed))  # under torchrun each rank drew its own
        # While the ranks import torch: the one-process run (bad input is refused here, and
        # the ranks it started are torn down on the way out).
        ref = reference(setup, setup.world)
        first = _run(ranks, setup, ref)
        causes = suspects(first, setup.world, setup.wrap)
        prove(causes, lambda fixes: _run(ranks, setup.with_fixes(*fixes), ref))
    result = DistributedResult(ref.where, ref.found, ref.model, setup.seed, setup.wrap, ranks.world, setup.backend,
                               ref.batch, ref.loss, first, causes, ref.model_bytes)
    return result


def _run(ranks: Ranks, setup: Setup, ref: Reference) -> Comparison:
    return judge(ref, ranks.run(job(setup)))


__all__ = ["Fix", "compare_distributed", "make_setup"]
