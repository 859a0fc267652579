"""One checked step's numbers, read from the device with one reduction and one host read.

Every gradient's L2 norm comes from one fused `torch._foreach_norm` (what
`clip_grad_norm_` uses), the losses `backward` ran on are summed one by one (a sum keeps a nan
or an inf), and the lot is stacked into one vector and read back with a single `.tolist()`:
no `.item()` per parameter, no forward or backward of its own, no random numbers drawn. A
norm is nan or inf whenever an element is (or, rarely, when a float16 sum of squares
overflows): `nonfinite_parameters` confirms element by element, and only runs on that rare
path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

#: Host reads made so far (the test counts one per checked step).
HOST_READS = [0]


@dataclass
class StepReading:
    losses: list[float]  # each backward root's sum, in the order backward ran
    norms: list[float | None]  # each parameter's gradient norm; None where it has no gradient

    @property
    def loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    @property
    def grad_norm(self) -> float:
        return math.sqrt(sum(n * n for n in self.norms if n is not None))

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in self.losses) and all(
            n is None or math.isfinite(n) for n in self.norms)


def read_step(losses: list[torch.Tensor], grads: list[torch.Tensor | None]) -> StepReading:
    present = [g for g in grads if g is not None]
    parts = []
    with torch.no_grad():
        if present:
            parts.append(_norms(present))
        if losses:
            parts.append(torch.stack([loss.detach().float().sum().to(_device(parts, loss)) for loss in losses]))
        values = torch.cat(parts).tolist() if parts else []
    HOST_READS[0] += 1
    norms_read = values[:len(present)]
    it = iter(norms_read)
    norms = [next(it) if g is not None else None for g in grads]
    return StepReading(values[len(present):], norms)


def _norms(grads: list[torch.Tensor]) -> torch.Tensor:
    grads = [g.to_local() if hasattr(g, "to_local") else g for g in grads]  # an FSDP2 DTensor: its shard
    device = grads[0].device
    try:
        norms = torch._foreach_norm(grads)
    except (RuntimeError, TypeError):  # mixed devices or layouts: one norm each
        norms = [torch.linalg.vector_norm(g) for g in grads]
    return torch.stack([n.to(device=device, dtype=torch.float32) for n in norms])


def _device(parts: list[torch.Tensor], loss: torch.Tensor) -> torch.device:
    return parts[0].device if parts else loss.device


def nonfinite_parameters(grads: list[torch.Tensor | None]) -> list[int]:
    """The indices of gradients holding a nan or inf, element by element (the rare path)."""
    with torch.no_grad():
        flags = [bool((~torch.isfinite(g)).any()) if g is not None else False for g in grads]
    return [i for i, bad in enumerate(flags) if bad]
