"""The reference: the same model on one process with the whole batch (what the ranks together
stand for), built from the same seed as every rank."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..targets.load import users_code
from .setup import Setup
from .target import build


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


def reference(setup: Setup, world: int) -> Reference:
    built = build(setup, None, world)
    model = built.model
    torch.manual_seed(setup.seed)
    with users_code(built.where):
        loss = built.loss_fn(model(*built.args, **built.kwargs))
        loss.backward()
    grads = {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in model.named_parameters() if p.requires_grad}
    norm = sum(float(g.double().pow(2).sum()) for g in grads.values() if g is not None) ** 0.5
    params = list(model.parameters())
    dtype = params[0].dtype if params else torch.float32
    size = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    return Reference(grads, float(loss.detach()), norm, built.where, built.found, built.batch, dtype, size, type(model).__name__)
