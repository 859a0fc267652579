"""What runs between backward and the optimizer's step, on every rank and on the one process:
torch's `clip_grad_norm_(model.parameters(), MAX)` (`--clip-grad-norm MAX`) or the user's own
code (`--before-step FILE:NAME`, called as NAME(model)), so that the gradients compared are the
ones the optimizer would get.

Each side also measures what the step did to its own gradients: the one factor that takes its
local gradients before the step to after it (clipping scales every element alike), and their
norm before it. From these causes.py tells clipping by each shard's own norm (FSDP2: every
rank sees 1/N of each gradient) from clipping by the whole gradient's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..targets.load import load_object, users_code
from .setup import Fix, Setup


@dataclass
class StepEffect:
    """What the step did to one side's local gradients (plain data: it crosses processes)."""

    factor: float | None  # the least-squares c with after ≈ c·before (None: no gradient at all)
    residual: float  # ‖after − c·before‖ / ‖after‖: 0 when the step scaled every element alike
    norm_before: float  # ‖local gradients‖ before the step (a rank's shard under FSDP2)

    @property
    def uniform(self) -> bool:
        return self.factor is not None and self.residual <= UNIFORM


#: The residual below which a step scaled every element by one factor (float32 rounding of a product).
UNIFORM = 1e-5


def describe(setup: Setup) -> str | None:
    """The step in words, as the user would write it (None: there is none)."""
    if setup.before_step is not None and Fix.CLIP_WHOLE not in setup.fixes:
        return f"{setup.before_step}(model)"
    if setup.clip is not None:
        return f"torch.nn.utils.clip_grad_norm_(model.parameters(), {setup.clip:g})"
    return None


def load(setup: Setup) -> Callable[[torch.nn.Module], Any] | None:
    """The step as a callable of the model; the user's is imported here (it is their code)."""
    if setup.before_step is not None and Fix.CLIP_WHOLE not in setup.fixes:
        return load_object(setup.before_step)[0]
    if setup.clip is not None:
        limit = setup.clip
        return lambda model: torch.nn.utils.clip_grad_norm_(model.parameters(), limit)
    return None


def run_step(model: torch.nn.Module, setup: Setup) -> StepEffect | None:
    """Run the step on `model`'s gradients, as the training loop does before optimizer.step()."""
    step = load(setup)
    if step is None:
        return None
    before = [_local(p.grad).detach().clone() for p in model.parameters() if p.grad is not None]
    with users_code(f"the step {describe(setup)}"):
        step(model)
    after = [_local(p.grad).detach() for p in model.parameters() if p.grad is not None]
    return _effect(before, after)


def _local(grad: torch.Tensor) -> torch.Tensor:
    """This side's own elements of a gradient (a DTensor's local shard under FSDP2)."""
    to_local = getattr(grad, "to_local", None)
    return to_local() if to_local is not None else grad


def _effect(before: list[torch.Tensor], after: list[torch.Tensor]) -> StepEffect:
    norm_before = math.sqrt(sum(float(b.double().pow(2).sum()) for b in before))
    if len(before) != len(after) or not before:
        return StepEffect(None, math.inf, norm_before)
    b = torch.cat([t.double().flatten() for t in before])
    a = torch.cat([t.double().flatten() for t in after])
    denom = float(b @ b)
    if not denom:
        return StepEffect(None, math.inf, norm_before)
    c = float(a @ b) / denom
    size = float(a.norm())
    residual = float((a - c * b).norm()) / size if size else 0.0
    return StepEffect(c, residual, norm_before)
