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


def summary(t: torch.Tensor) -> list[float]:
    """[norm, projection] of `t` (nan when `t` holds a nan or inf)."""
    return summaries([t])[0]


def summaries(tensors: list[torch.Tensor]) -> list[list[float]]:
    """[norm, projection] of each tensor without a float64 copy of it, and one host read for
    all (bench/diverge.py). The norm accumulates in float64 (torch's float32 norm of a million
    elements is 8e-6 off, more than the band of a float32 run's first steps); the projection is
    a dot in the tensor's own precision (float64 for float64, float32 otherwise)."""
    flats = []
    for t in tensors:
        flat = t.detach().reshape(-1)
        flats.append(flat if flat.dtype in (torch.float32, torch.float64) else flat.to(torch.float32))
    if not flats:
        return []
    norms = [torch.linalg.vector_norm(flat, dtype=torch.float64) for flat in flats]
    dots = [torch.dot(flat, _direction(flat.numel(), flat.dtype)) if flat.numel() else flat.new_zeros(()) for flat in flats]
    values = torch.stack([torch.stack([n, d.double()]) for n, d in zip(norms, dots)]).tolist()
    return [[float(n), float(d)] for n, d in values]


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
