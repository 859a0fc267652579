"""Fingerprints small enough to write at every step, and comparable across precisions.

A tensor is summed up by two numbers: its norm and its projection on a fixed random
direction (a unit-variance vector drawn from a private generator seeded by the tensor's size,
so both runs project on the same direction and the script's own random state is never drawn
from). Two tensors that agree to rounding give close pairs; a changed tensor moves the
projection even where its norm stays. The batch is fingerprinted exactly (a hash of its
bytes): the data either is the same or is not.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch

_DIRECTIONS: dict[tuple[int, torch.dtype], torch.Tensor] = {}
#: The elements per block of a large float32 tensor's norm: each block's norm is taken in
#: float32 (one reduction over all the blocks), their squares are added in float64. A block of
#: 256 is typically ~u·sqrt(256) off, and the blocks' errors average out: against torch's float64
#: norm (tests/divergence/test_diverge_norm.py) the norm of 2^16 elements or more stays within a tenth of
#: the band's floor (16 float32 unit roundoffs, 9.5e-7); 1e-9 on a million. Blocks of 4096 (a
#: float32 dot each) were 1e-7 off on a million.
BLOCK = 256
#: Smaller float32 tensors take torch's float64-accumulated norm: a few blocks would not average
#: out, and on so few elements it costs no more.
BLOCKED_FROM = 2**16
#: A float32 norm below this is recomputed in float64: its squares may be float32 subnormals.
TINY = 1e-15


def summary(t: torch.Tensor) -> list[float]:
    """[norm, projection] of `t` (nan when `t` holds a nan or inf)."""
    return summaries([t])[0]


def summaries(tensors: list[torch.Tensor]) -> list[list[float]]:
    """[norm, projection] of each tensor without a float64 copy of it, and one host read for
    all (bench/diverge.py). The norm of a float32 tensor is `norm()` (torch's float32 norm of a
    million elements is 1e-5 off, more than the band of a float32 run's first steps, and its
    float64-accumulated norm costs several times a float32 pass); the projection is a dot in the
    tensor's own precision (float64 for float64, float32 otherwise)."""
    flats = []
    for t in tensors:
        flat = t.detach().reshape(-1)
        flats.append(flat if flat.dtype in (torch.float32, torch.float64) else flat.to(torch.float32))
    if not flats:
        return []
    norms = [norm(flat) for flat in flats]
    dots = [torch.dot(flat, _direction(flat.numel(), flat.dtype)) if flat.numel() else flat.new_zeros(()) for flat in flats]
    values = torch.stack([torch.stack([n, d.double()]) for n, d in zip(norms, dots)]).tolist()
    for k, (n, _) in enumerate(values):
        if flats[k].dtype == torch.float32 and not TINY <= n < math.inf:
            # a block's float32 squares overflowed (a finite element past 1.8e19) or came near
            # float32's underflow (a norm below 1e-15), or the tensor holds nan or inf: exactly
            values[k][0] = float(torch.linalg.vector_norm(flats[k], dtype=torch.float64))
    return [[float(n), float(d)] for n, d in values]


def norm(flat: torch.Tensor) -> torch.Tensor:
    """The 2-norm of a flat tensor, as a float64 scalar tensor: for a large float32 one, the
    float32 norm of each block of BLOCK elements (one reduction: each block's rounding is that of
    256 terms, not of the million) and their squares added in float64; else torch's norm
    accumulated in float64.
    A nan or inf anywhere makes it nan or inf, as torch's norm does."""
    n = flat.numel()
    if flat.dtype != torch.float32 or n < BLOCKED_FROM:
        return torch.linalg.vector_norm(flat, dtype=torch.float64)
    full = n - n % BLOCK
    total = flat.new_zeros((), dtype=torch.float64)
    if full:
        blocks = torch.linalg.vector_norm(flat[:full].view(-1, BLOCK), dim=1)
        total = blocks.double().square().sum()
    if n > full:
        tail = flat[full:]
        total = total + torch.dot(tail, tail).double()
    return total.sqrt()


def _direction(n: int, dtype: torch.dtype) -> torch.Tensor:
    """The fixed direction of a tensor of n elements: the same in every run, drawn from a
    private generator (never the script's)."""
    direction = _DIRECTIONS.get((n, dtype))
    if direction is None:
        generator = torch.Generator().manual_seed(n)
        drawn = torch.randn(n, generator=generator, dtype=torch.float64) / math.sqrt(n)
        direction = _DIRECTIONS[(n, dtype)] = drawn.to(dtype)
    return direction


def batch_hash(args: Any, kwargs: Any) -> str | None:
    """A hash of every tensor's bytes, shape and dtype in a call's arguments (None: no tensor)."""
    digest = hashlib.blake2b(digest_size=12)
    found = False
    for t in _tensors((args, kwargs)):
        found = True
        data = t.detach().cpu().contiguous()
        digest.update(f"{tuple(data.shape)}{data.dtype}".encode())
        digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest() if found else None


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []
