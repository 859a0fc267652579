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
    """[norm, projection] of `t` (nan when `t` holds a nan or inf). The norm accumulates in
    float64; the projection is taken in `t`'s own precision (float64 for float64, float32
    otherwise), without a float64 copy of the tensor: a step reads every gradient and every
    parameter once more for each, no more (bench/diverge.py)."""
    flat = t.detach().reshape(-1)
    n = flat.numel()
    if not n:
        return [0.0, 0.0]
    dtype = torch.float64 if flat.dtype == torch.float64 else torch.float32
    if flat.dtype != dtype:
        flat = flat.to(dtype)
    direction = _DIRECTIONS.get((n, dtype))
    if direction is None:
        generator = torch.Generator().manual_seed(n)
        drawn = torch.randn(n, generator=generator, dtype=torch.float64) / math.sqrt(n)
        direction = _DIRECTIONS[(n, dtype)] = drawn.to(dtype)
    return [float(torch.linalg.vector_norm(flat, dtype=torch.float64)), float(torch.dot(flat, direction))]


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
