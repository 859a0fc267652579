"""The reference: the same model on one process with the whole batch (what the ranks together
stand for), built from the same seed as every rank."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from ..targets.load import users_code
from .setup import Setup
from .step import StepEffect, run_step
from .target import Built, build


@dataclass
class Reference:
    gradients: dict[str, torch.Tensor | None]
    loss: float
    norm: float  # ‖all gradients‖
    where: str
    found: str
    batch: int
    dtype: torch.dtype
    model_bytes: int  # parameters' bytes: what one gradient copy weighs
    model: str  # the class name
    noise: dict[str, float]  # each gradient's relative error against float64 (empty for float64 models)
    step: StepEffect | None = None  # what the step between backward and optimizer.step did here
    numels: dict[str, int] = field(default_factory=dict)  # each trainable parameter's elements (with or without a gradient)


def reference(setup: Setup, world: int) -> Reference:
    built = build(setup, None, world)
    model, whole = built.model, built.micro[0]
    exact = copy.deepcopy(model).double() if _rounds(model) else None
    torch.manual_seed(setup.seed)
    with users_code(built.where):
        loss = whole.loss_fn(model(*whole.args, **whole.kwargs))
        loss.backward()
    step = run_step(model, setup)
    grads = {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in model.named_parameters() if p.requires_grad}
    noise = _rounding_noise(exact, built, setup, grads) if exact is not None else {}
    norm = sum(float(g.double().pow(2).sum()) for g in grads.values() if g is not None) ** 0.5
    params = list(model.parameters())
    dtype = params[0].dtype if params else torch.float32
    size = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    numels = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    return Reference(grads, float(loss.detach()), norm, built.where, built.found, built.batch, dtype, size,
                     type(model).__name__, noise, step, numels)


def _rounds(model: torch.nn.Module) -> bool:
    """Whether the model computes in a float type coarser than float64 (float32, bfloat16,
    float16): its own rounding, measured against float64, sets the tolerance."""
    return any(p.is_floating_point() and p.dtype != torch.float64 for p in model.parameters())


def _rounding_noise(exact: torch.nn.Module, built: Built, setup: Setup,
                    grads: dict[str, torch.Tensor | None]) -> dict[str, float]:
    """Each gradient's rounding error on one process in the model's own dtype: its relative
    distance from the same run in float64. A deep network's float32 gradients carry errors well
    above one sum's rounding (8u√batch), a bfloat16 network's far more; two runs that sum in
    another order (N ranks, one process) differ by about this much, so the tolerance is never
    below a multiple of it."""
    whole = built.micro[0]
    args = tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in whole.args)
    kwargs = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in whole.kwargs.items()}
    torch.manual_seed(setup.seed)
    try:
        whole.loss_fn(exact(*args, **kwargs)).backward()
        run_step(exact, setup)
    except Exception:  # a forward that pins its dtype (x.to(torch.bfloat16)) has no float64 run: nothing measured
        return {}
    noise = {}
    for name, p in exact.named_parameters():
        g32 = grads.get(name)
        if p.grad is None or g32 is None:
            continue
        size = float(p.grad.norm())
        noise[name] = float((g32.double() - p.grad).norm()) / size if size else 0.0
    return noise
