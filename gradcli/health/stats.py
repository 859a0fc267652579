"""The numbers of a parameter's gradient: L2 norm, max and mean |g|, share of exact zeros.

Each is one pass over the gradient without a temporary of its size (vector norms, aminmax,
count_nonzero), and all parameters' numbers are gathered into one tensor and read with one
`.tolist()`, so a large model pays a few passes over its gradients and nothing per element
in Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class GradStats:
    grad_norm: float
    max_abs: float
    mean_abs: float
    zero_share: float
    finite: bool


def param_norms(params: list[torch.Tensor]) -> list[float]:
    if not params:
        return []
    with torch.no_grad():
        norms = torch.stack([torch.linalg.vector_norm(p.detach()).double() for p in params]).tolist()
        for i, (norm, p) in enumerate(zip(norms, params)):
            if (norm == 0.0 or math.isinf(norm)) and bool(torch.isfinite(p).all()):
                norms[i] = scaled_norm(p)  # its squares under- or overflowed (float32 beyond ~1e-23 or ~1e19)
        return norms


def scaled_norm(t: torch.Tensor) -> float:
    """The L2 norm in float64 of `t` divided by its largest magnitude, times it: no square
    under- or overflows (a finite tensor)."""
    t = t.detach().double()
    top = float(t.abs().max()) if t.numel() else 0.0
    return 0.0 if top == 0.0 else top * torch.linalg.vector_norm(t / top).item()


def grad_stats(grads: list[torch.Tensor]) -> list[GradStats]:
    """The numbers of each gradient (all of them float, nan/inf where the gradient has them)."""
    if not grads:
        return []
    rows = []
    with torch.no_grad():
        for g in grads:
            g = g.detach()
            if g.is_complex():
                g = g.abs()
            low, high = torch.aminmax(g.reshape(-1)) if g.numel() else (g.new_zeros(()), g.new_zeros(()))
            n = max(g.numel(), 1)
            rows.append(torch.stack([
                torch.linalg.vector_norm(g).double(),
                torch.maximum(low.abs(), high.abs()).double(),
                torch.linalg.vector_norm(g, 1).double() / n,
                (g.numel() - torch.count_nonzero(g)).double() / n,
            ]))
        values = torch.stack(rows).tolist()
        stats = []
        for v, g in zip(values, grads):
            finite = math.isfinite(v[0]) or bool(torch.isfinite(g).all())
            if finite and not math.isfinite(v[0]):  # a finite float32 gradient whose norm overflows
                v[0] = torch.linalg.vector_norm(g.detach().double()).item()
                v[2] = torch.linalg.vector_norm(g.detach().double(), 1).item() / max(g.numel(), 1)
            elif v[0] == 0.0 and v[1] > 0.0:  # non-zero elements whose squares underflow (float32 below ~1e-23)
                v[0] = scaled_norm(g)
            stats.append(GradStats(v[0], v[1], v[2], v[3], finite))
    return stats
