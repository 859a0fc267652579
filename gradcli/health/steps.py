"""--steps N --lr LR: plain SGD on the same batch, on a deep copy of the model.

Exploding and dying often show only after a few updates (a ReLU layer pushed below zero by
one large step). The copy is made with `copy.deepcopy`, so the user's model, its `.grad` and
its files are never touched; each step takes gradients with `torch.autograd.grad` and
updates `p -= lr * grad`.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import torch

from ..errors import UsageError
from .result import Finding, ParamHealth, StepsRecord
from .stats import grad_stats, param_norms
from .thresholds import Thresholds


def run_steps(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: Callable[[Any], Any],
    params: list[ParamHealth], count: int, lr: float,
) -> tuple[StepsRecord, dict[str, list[float | None]], dict[str, list[float | None]]]:
    """The losses, and each judged parameter's ‖grad‖ and ‖grad‖/‖param‖ at each step (the
    first is the model as given), None where it got no gradient."""
    try:
        twin = copy.deepcopy(model)
    except Exception as err:  # the user's model: anything may refuse to be copied
        raise UsageError(
            f"--steps needs a copy of the model and copy.deepcopy raised {type(err).__name__}: {err}",
            hint="run without --steps, or make the model copyable",
        ) from None
    named = dict(twin.named_parameters())
    judged = [p.name for p in params if not p.frozen]
    tensors = [named[name] for name in judged]
    norms: dict[str, list[float | None]] = {name: [] for name in judged}
    ratios: dict[str, list[float | None]] = {name: [] for name in judged}
    losses = []
    for _ in range(count):
        loss = loss_fn(twin(*args, **kwargs))
        losses.append(float(loss.detach()))
        grads = torch.autograd.grad(loss, tensors, allow_unused=True) if loss.requires_grad else [None] * len(tensors)
        present = [g for g in grads if g is not None]
        stats = iter(grad_stats(present))
        sizes = param_norms(tensors)
        for name, grad, size, row in zip(judged, grads, sizes, (p for p in params if not p.frozen)):
            size = size or row.reference_norm  # an all-zero parameter: its module's norm, as in the table
            value = next(stats).grad_norm if grad is not None else None
            norms[name].append(value)
            ratios[name].append(value / size if value is not None and size > 0 else None)
        with torch.no_grad():
            for tensor, grad in zip(tensors, grads):
                if grad is not None:
                    tensor.add_(grad, alpha=-lr)
    return StepsRecord(count, lr, losses), norms, ratios


def step_findings(param: ParamHealth, ratios: list[float | None], lr: float, thresholds: Thresholds) -> list[Finding]:
    """Flags that appear only after some steps (the first step is the model as given)."""
    have = set(param.flags)
    after = f"after {{k}} SGD step{{s}} (lr {lr:g})"
    norms = param.steps or []
    for k, (norm, ratio) in enumerate(zip(norms, ratios)):
        if k == 0 or norm is None:
            continue
        when = after.format(k=k, s="" if k == 1 else "s")
        if not math.isfinite(norm) and "NONFINITE" not in have:
            return [Finding("NONFINITE", f"its gradient became {'nan' if math.isnan(norm) else 'inf'} {when}")]
        if norm == 0 and "ZERO" not in have and (norms[0] or 0) > 0:
            return [Finding("ZERO", f"its gradient became exactly 0 {when} (a unit died)")]
        if ratio is not None and ratio > thresholds.explode and "EXPLODING" not in have:
            return [Finding("EXPLODING", f"‖grad‖/‖param‖ rose to {ratio:.2g} {when}, above {thresholds.explode:g}")]
    return []
