"""One checked step's numbers, read from the device with one reduction and one host read.

Every gradient's L2 norm comes from one fused `torch._foreach_norm` (what `clip_grad_norm_`
uses; on the CPU, a large gradient's from BLAS's dot, see _norms), the losses `backward` ran on
are summed one by one (a sum keeps a nan or an inf), and the lot is stacked into one vector and
read back with a single `.tolist()`:
no `.item()` per parameter, no forward or backward of its own, no random numbers drawn. A
norm is nan or inf whenever an element is (or, rarely, when a float32 sum of squares
overflows: float16 and bfloat16 gradients are reduced in float32): `nonfinite_parameters`
confirms element by element, and only runs on that rare path. When precursors.py needs
Adam's second moments summed (to set its running sums, or each check when they cannot be kept
without reading), their L1 norms join the same vector: still one host read.
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
    moments: list[float] | None = None  # the sums of the second moments asked for, in their order

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


def read_step(losses: list[torch.Tensor], grads: list[torch.Tensor | None],
              moments: list[torch.Tensor] | None = None) -> StepReading:
    """`moments`: second-moment tensors (all >= 0) whose sums are wanted too."""
    present = [g for g in grads if g is not None]
    parts = []
    with torch.no_grad():
        if present:
            parts.append(_norms(present))
        if moments:
            parts.append(_norms(moments, order=1).to(parts[0].device if parts else moments[0].device))
        if losses:
            parts.append(torch.stack([loss.detach().float().sum().to(_device(parts, loss)) for loss in losses]))
        values = torch.cat(parts).tolist() if parts else []
    HOST_READS[0] += 1
    it = iter(values[:len(present)])
    norms = [next(it) if g is not None else None for g in grads]
    taken = len(present) + len(moments or ())
    return StepReading(values[taken:], norms, values[len(present):taken] if moments else None)


#: The dtypes whose CPU norms come from BLAS's dot (float16 and bfloat16 squares would overflow).
_DOT_DTYPES = (torch.float32, torch.float64)


def _norms(tensors: list[torch.Tensor], order: int = 2) -> torch.Tensor:
    """Each tensor's L`order` norm, as one float32 vector on the first tensor's device; order 1
    is only asked of tensors that are >= 0 (Adam's second moments), whose L1 norm is their sum.

    On the CPU a float32/float64 tensor's L2 norm is sqrt(dot(g, g)) and its L1 norm its sum:
    BLAS runs on every core, where `_foreach_norm` reduces on one (100 MB of gradients: 6.0 ms
    on this machine's 2 cores against 12.3 ms; Adam's 100 MB of second moments: 5 ms against
    26), and one dot per tensor, small ones included, with one square root over the lot, is
    the fewest calls: ResNet-18's 62 gradients are read in 1.6 ms against 2.1 ms for the
    dot-for-large, foreach-for-small split it replaced, GPT-2's in 0.9 against 1.25. The rest
    (half precision, other devices, other layouts) go through one fused norm per dtype. A nan
    or inf gives a nan or inf either way."""
    tensors = [t if type(t) is torch.Tensor else local(t) for t in tensors]  # an FSDP2 DTensor: its shard
    device = tensors[0].device
    dotted = [_dot_ready(t) for t in tensors]
    if not any(dotted):
        return _foreach(tensors, order).to(device)
    if all(dotted):  # the usual case: every gradient a dense CPU float32 tensor
        flats = [t.view(-1) for t in tensors]
        if order == 2:
            return torch.stack([torch.dot(f, f) for f in flats]).float().sqrt_()
        return torch.stack([f.sum() for f in flats]).float()
    reduced = torch.empty(len(tensors), device=device)
    rest = []
    for i, (t, ready) in enumerate(zip(tensors, dotted)):
        if ready:
            flat = t.view(-1)
            reduced[i] = torch.dot(flat, flat).sqrt() if order == 2 else flat.sum()
        else:
            rest.append(i)
    reduced[rest] = _foreach([tensors[i] for i in rest], order).to(device)
    return reduced


def _dot_ready(t: torch.Tensor) -> bool:
    return t.is_cpu and t.dtype in _DOT_DTYPES and t.layout == torch.strided and t.is_contiguous()


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's own values: an FSDP2 DTensor's local shard (torch reads a DTensor's numbers
    only through a collective), any other tensor as it is. XXX: a statistic over shards is each
    rank's own, not the whole parameter's."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _foreach(tensors: list[torch.Tensor], order: int) -> torch.Tensor:
    """One fused norm per group: float16 and bfloat16 tensors are reduced in float32 (their own
    norm is a float16, which a sum past 65504 overflows), the others in their own dtype."""
    device = tensors[0].device
    groups: dict[torch.dtype | None, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else None, []).append(i)
    norms: list[torch.Tensor | None] = [None] * len(tensors)
    for dtype, group in groups.items():
        chosen = [tensors[i] for i in group]
        try:
            found = torch._foreach_norm(chosen, order, dtype=dtype)
        except (RuntimeError, TypeError):  # mixed devices or layouts (or a torch without dtype=): one norm each
            found = [torch.linalg.vector_norm(t, order, dtype=dtype) for t in chosen]
        for i, n in zip(group, found):
            norms[i] = n
    return torch.stack([n.to(device=device, dtype=torch.float32) for n in norms])  # type: ignore[union-attr]


def _device(parts: list[torch.Tensor], loss: torch.Tensor) -> torch.device:
    return parts[0].device if parts else loss.device


def nonfinite_parameters(grads: list[torch.Tensor | None]) -> list[int]:
    """The indices of gradients holding a nan or inf, element by element (the rare path)."""
    with torch.no_grad():
        flags = [bool((~torch.isfinite(g)).any()) if g is not None else False for g in grads]
    return [i for i, bad in enumerate(flags) if bad]
