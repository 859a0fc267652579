"""What one distributed run is, as plain data: it crosses process boundaries (pickled to every
spawned rank), so it holds texts and numbers, never a model or a tensor."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Literal

Wrap = Literal["ddp", "fsdp"]


class Fix(str, enum.Enum):
    """A change to the run that removes one cause; rerunning with it is the cause's proof."""

    SYNC_BATCHNORM = "sync-batchnorm"  # BatchNorm statistics over the whole batch, not the shard
    SCALE_LOSS = "scale-loss"  # a sum-reduced loss times the world size (DDP averages)
    FIND_UNUSED = "find-unused-parameters"  # DDP(find_unused_parameters=True)
    BROADCAST = "broadcast-weights"  # rank 0's initial weights on every rank before wrapping
    DIVIDE_BY_STEPS = "divide-by-steps"  # each accumulation micro-step's loss divided by their count
    CLIP_WHOLE = "clip-whole-norm"  # clip_grad_norm_ over the whole (DTensor) gradients instead of the step given


@dataclass(frozen=True)
class Setup:
    """The user's target and how it runs on the ranks."""

    target: str
    variables: tuple[str, ...] = ()
    loss: str | None = None
    init: tuple[str, ...] = ()
    seed: int = 0
    library_dirs: tuple[str, ...] = ()
    wrap: Wrap = "ddp"
    world: int = 2
    device: str = "cpu"
    accumulate: int = 1  # micro-steps per optimizer step: all but the last under no_sync
    clip: float | None = None  # clip_grad_norm_(model.parameters(), clip) after backward
    before_step: str | None = None  # the user's FILE:NAME called as NAME(model) after backward
    fixes: frozenset[Fix] = field(default_factory=frozenset)

    def with_fixes(self, *fixes: Fix) -> "Setup":
        return replace(self, fixes=self.fixes | frozenset(fixes))

    @property
    def backend(self) -> str:
        return "nccl" if self.device.startswith("cuda") else "gloo"
