"""`compare --ddp N` / `--fsdp N`: start the ranks, run the user's model on them, compare with
the one-process reference, and prove the causes by rerunning with fixes on the same ranks."""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace
from typing import Sequence

import torch

from ..errors import UsageError
from ..targets.load import load_object
from ..targets.spec import ModelSpec
from .causes import prove, suspects
from .judge import judge
from .launch import TIMEOUT, Ranks, start_ranks
from .reference import Reference, reference
from .result import Cause, Comparison, DistributedResult
from .setup import Fix, Setup, Wrap
from .step import describe
from .worker import job

#: The most ranks spawned on one machine (each imports torch: ~0.4 GB and seconds).
MAX_SPAWNED = 16


def make_setup(model: ModelSpec, *, wrap: Wrap = "ddp", world: int = 2, accumulate: int = 1, clip: float | None = None,
               before_step: str | None = None) -> Setup:
    """The run's plain description, checked before any rank starts."""
    device = model.device
    from .launch import under_torchrun

    if world < 2 and not under_torchrun():
        raise UsageError(f"--{wrap} needs 2 or more ranks, not {world}", hint=f"--{wrap} 2 compares two ranks with one process")
    if world > MAX_SPAWNED and not under_torchrun():
        raise UsageError(f"--{wrap} {world}: at most {MAX_SPAWNED} ranks are started on one machine",
                         hint="for more, launch gradcli under torchrun --nproc-per-node/--nnodes")
    if device.startswith("cuda") and torch.cuda.device_count() < (1 if under_torchrun() else world):
        raise UsageError(f"--device cuda with {world} ranks needs {world} GPUs; this machine has {torch.cuda.device_count()}",
                         hint="leave out --device to run the ranks on the CPU (backend gloo)")
    if accumulate < 1:
        raise UsageError(f"--accumulate {accumulate}: the micro-steps per optimizer step are 1 or more",
                         hint="--accumulate 4 runs each rank's shard as 4 micro-batches, the first 3 under no_sync")
    if clip is not None and before_step is not None:
        raise UsageError("--clip-grad-norm and --before-step are two steps after backward: give one of them",
                         hint="put the clipping into your --before-step function if it does more")
    if clip is not None and not (clip > 0 and math.isfinite(clip)):
        raise UsageError(f"--clip-grad-norm {clip:g}: the maximum norm is a positive number")
    if before_step is not None:
        load_object(before_step)  # a missing file or name is an error before any rank starts
    if model.seed is None:
        model = replace(model, seed=int(torch.randint(0, 2**31 - 1, ()).item()))
    return Setup(model, wrap, world, accumulate, clip, before_step)


def compare_distributed(setup: Setup, *, timeout: float = TIMEOUT, ranks: Ranks | None = None) -> DistributedResult:
    """The user's model on `setup.world` ranks against one process, with causes proven.
    `ranks`: a group already running (tests share one), else one is started and torn down."""
    with contextlib.ExitStack() as stack:
        if ranks is None:
            ranks = stack.enter_context(start_ranks(setup.world, setup.backend, timeout))
        setup = setup.agreed(ranks.agree(setup.seed))
        # While the ranks import torch: the one-process run (bad input is refused here, and
        # the ranks it started are torn down on the way out).
        ref = reference(setup, setup.world)
        first = _run(ranks, setup, ref)
        causes = suspects(first, setup, ref.step)
        prove(causes, lambda fixing: _run(ranks, _fixed(setup, fixing), ref))
    result = DistributedResult(ref.where, ref.found, ref.model, setup.seed, setup.wrap, ranks.world, setup.backend,
                               ref.batch, ref.loss, first, causes, ref.model_bytes, setup.accumulate, describe(setup), ref.step)
    return result


def _run(ranks: Ranks, setup: Setup, ref: Reference) -> Comparison:
    return judge(ref, ranks.run(job(setup)))


def _fixed(setup: Setup, causes: Sequence[Cause]) -> Setup:
    """`setup` with every cause's fix (clipping the whole gradient at the maximum the shards
    were clipped to)."""
    fixed = setup.with_fixes(*(c.fix for c in causes))
    for cause in causes:
        if cause.fix is Fix.CLIP_WHOLE:
            fixed = replace(fixed, clip=cause.evidence["max_norm"])
    return fixed


__all__ = ["Fix", "compare_distributed", "make_setup"]
