"""The largest errors of a comparison over millions of points, one chunk at a time.

`compare` measures each chunk's errors in its first pass, against the float64 value of the
exact formula. A few points then get a better truth, their 50-digit value: the arbitrated
points and the agreeing points sampled all the same (`compare._sampled`). Measuring a chunk
again for them costs a clone of the truth and five passes over its 10^6 points, and as every
chunk holds a sampled point, every chunk would be measured twice; on a busy machine each of
those kernels also pays torch's spinning OpenMP workers (bench/README.md). So a chunk's
maxima are updated at those points only. That gives the numbers measuring again would give
unless one of the points held the chunk's maximum before (its old error may have been the
only one that large; what the rest reach is then unknown): such a chunk is measured again.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .symbolic import CHUNK


class Maxima(NamedTuple):
    """One chunk's errors over its counted points."""

    abs: float | None  # largest |got - truth|, nan counted as inf; None if nothing is counted
    rel: float | None  # largest |got - truth| / |truth| where |truth| > atol; None if none
    scaled: float  # largest error over its tolerance (-1.0 if nothing is counted; nan above all)
    at: int  # the first index (in the chunk) holding `scaled`, as torch's argmax picks it


def chunk_errors(c: torch.Tensor, gap: torch.Tensor, tol: torch.Tensor, size: torch.Tensor, atol: float) -> Maxima:
    """One chunk's maxima over the counted points `c`; `gap` = |got - truth|, `tol` = atol +
    rtol*|truth|, `size` = |truth|."""
    every = bool(c.all())  # the usual case: the same values without the masking
    err = gap if every else torch.where(c, gap, 0.0)
    err = torch.where(torch.isnan(err), math.inf, err)
    scaled = err / tol if every else torch.where(c, err / tol, -1.0)
    rel_ok = size > atol if every else c & (size > atol)
    at = int(scaled.argmax())  # torch: the first nan, else the first largest
    value = scaled[at].item()
    part_abs = float(err.max()) if every else float(err[c].max()) if c.any() else None
    part_rel = float((err[rel_ok] / size[rel_ok]).max()) if rel_ok.any() else None
    return Maxima(part_abs, part_rel, value, at)


def errors(
    got: torch.Tensor, ref: torch.Tensor, counted: torch.Tensor, overrides: dict[int, float], atol: float, rtol: float,
    measured: dict[int, Maxima], recounted: set[int],
) -> tuple[float, float, int]:
    """Over the counted points, against the truth (`ref`, or the 50-digit value in
    `overrides`): the largest absolute error, the largest relative error (where |truth| >
    atol; 0.0 if none) and the first point with the largest error relative to the tolerance.
    `measured` holds each chunk's maxima against `ref` over the points counted then (by chunk
    start); `recounted` are the overridden points that were among those. The per-chunk maxima
    combine exactly as one maximum over all points would (nan included, as torch orders it:
    above everything).
    """
    by_chunk: dict[int, list[int]] = {}
    for index in sorted(overrides):
        by_chunk.setdefault(index - index % CHUNK, []).append(index)
    max_abs, max_rel, best, worst = -math.inf, None, -math.inf, 0
    for start in range(0, got.numel(), CHUNK):
        part = measured[start]
        if start in by_chunk:
            indices = by_chunk[start]
            values = [overrides[i] for i in indices]
            part = _updated(part, start, indices, values, recounted, got, ref, atol, rtol) or _measured(
                start, indices, values, got, ref, counted, atol, rtol
            )
        if not math.isnan(best) and (math.isnan(part.scaled) or part.scaled > best):
            best, worst = part.scaled, start + part.at
        if part.abs is not None:
            max_abs = _max(max_abs, part.abs)
        if part.rel is not None:
            max_rel = part.rel if max_rel is None else _max(max_rel, part.rel)
    return max_abs, 0.0 if max_rel is None else max_rel, worst


def _updated(
    before: Maxima, start: int, indices: list[int], values: list[float], recounted: set[int], got: torch.Tensor,
    ref: torch.Tensor, atol: float, rtol: float,
) -> Maxima | None:
    """The chunk's maxima with the truth at `indices` (all counted now) replaced by `values`,
    from `before` and those points alone; None if one of them may have held a maximum before."""
    at = torch.tensor(indices)
    g = got[at]
    old_err, old_scaled, old_rel = _pointwise(g, ref[at], atol, rtol)
    for k, index in enumerate(indices):
        if index not in recounted:
            continue  # not counted before: its old error is in no maximum
        if index == start + before.at or before.abs is None or not old_err[k] < before.abs:
            return None
        if old_rel[k] is not None and (before.rel is None or not old_rel[k] < before.rel):
            return None
    # Every maximum is now held by a point that keeps its truth: the rest of the chunk
    # reaches exactly `before`, and the overridden points add their new errors.
    new_err, new_scaled, new_rel = _pointwise(g, torch.tensor(values, dtype=torch.float64), atol, rtol)
    part_abs = before.abs
    for value in new_err:
        part_abs = value if part_abs is None else _max(part_abs, value)
    part_rel = before.rel
    for value in new_rel:
        if value is not None:
            part_rel = value if part_rel is None else _max(part_rel, value)
    # torch's argmax over the chunk: the first nan, else the first largest.
    candidates = [(before.scaled, before.at), *((s, i - start) for s, i in zip(new_scaled, indices))]
    nans = [where for value, where in candidates if math.isnan(value)]
    if nans:
        return Maxima(part_abs, part_rel, math.nan, min(nans))
    value, where = max(candidates, key=lambda pair: (pair[0], -pair[1]))
    return Maxima(part_abs, part_rel, value, where)


def _pointwise(got: torch.Tensor, truth: torch.Tensor, atol: float, rtol: float) -> tuple[list, list, list]:
    """Each point's error, error over tolerance and relative error (None where |truth| <=
    atol), by the same tensor operations `chunk_errors` reads."""
    size = truth.abs()
    err = (got - truth).abs()
    err = torch.where(torch.isnan(err), math.inf, err)
    scaled = err / (atol + rtol * size)
    rel = torch.where(size > atol, err / size, math.nan)
    return err.tolist(), scaled.tolist(), [r if s else None for r, s in zip(rel.tolist(), (size > atol).tolist())]


def _measured(
    start: int, indices: list[int], values: list[float], got: torch.Tensor, ref: torch.Tensor, counted: torch.Tensor,
    atol: float, rtol: float,
) -> Maxima:
    """The chunk measured again with the truth at `indices` replaced by `values`."""
    part = slice(start, start + CHUNK)
    truth = ref[part].clone()
    truth[torch.tensor(indices) - start] = torch.tensor(values, dtype=torch.float64)
    size = truth.abs()
    return chunk_errors(counted[part], (got[part] - truth).abs(), atol + rtol * size, size, atol)


def _max(a: float, b: float) -> float:
    """max() that propagates nan, as a tensor's .max() does."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)
