"""What one distributed run is, as plain data: it crosses process boundaries (pickled to every
spawned rank), so it holds texts and numbers, never a model or a tensor: the model options'
one record (targets/spec.py's ModelSpec) and how the ranks run it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Literal

from ..targets.spec import ModelSpec

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
    """The user's target (its model options, seeded: every rank draws the same weights) and
    how it runs on the ranks."""

    model: ModelSpec
    wrap: Wrap = "ddp"
    world: int = 2
    accumulate: int = 1  # micro-steps per optimizer step: all but the last under no_sync
    clip: float | None = None  # clip_grad_norm_(model.parameters(), clip) after backward
    before_step: str | None = None  # the user's FILE:NAME called as NAME(model) after backward
    fixes: frozenset[Fix] = field(default_factory=frozenset)

    def with_fixes(self, *fixes: Fix) -> "Setup":
        return replace(self, fixes=self.fixes | frozenset(fixes))

    def agreed(self, seed: int) -> "Setup":
        """The setup with the seed every rank agreed on (under torchrun each drew its own)."""
        return replace(self, model=replace(self.model, seed=seed))

    @property
    def seed(self) -> int:
        assert self.model.seed is not None, "make_setup draws the seed"
        return self.model.seed

    @property
    def device(self) -> str:
        return self.model.device

    @property
    def backend(self) -> str:
        return "nccl" if self.device.startswith("cuda") else "gloo"
