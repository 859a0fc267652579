"""The ranks' reduced gradients judged against the reference with comparison/gradients.py (the
same verdict `compare` gives), per parameter and per rank, plus what only N ranks can show:
the spread between ranks and the reduced gradient's scale relative to the reference."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..comparison.gradients import Flag, ParamComparison, Tolerance, compare_gradient
from .reference import Reference
from .result import Comparison, Norms, ParamRow
from .worker import RankRun


#: How many times one process's own float32 rounding error (against float64) a reduced
#: gradient may be off: two float32 runs summing in different orders differ by up to about
#: twice it; the causes found here are off by 1e-2 and more.
NOISE_FACTOR = 10.0
#: ... but never more than this: a gradient zero up to rounding (a bias before BatchNorm) has
#: a huge relative error against float64, and is judged apart (`_compare`'s floor).
NOISE_CAP = 1e-3
#: The cap for a bfloat16 or float16 model, whose ranks differ from one process by 1e-3 and more
#: from the order of their sums alone: still under what the causes make (a sum loss's 0.5 at 2
#: ranks, BatchNorm per shard's 0.15).
HALF_NOISE_CAP = 5e-2


def judge(ref: Reference, runs: Sequence[RankRun]) -> Comparison:
    per_rank = [run.gradients() for run in runs]
    # Rounding of a sum over the batch grows like its square root (compare's calibration); a
    # deep model's float32 gradients carry more (measured against float64: Reference.noise).
    full = ref.dtype in (torch.float64, torch.float32)
    base = Tolerance(ref.dtype if full else torch.float32, ref.batch).value
    cap = NOISE_CAP if full else HALF_NOISE_CAP
    rows = []
    for name, g_ref in ref.gradients.items():
        noise = ref.noise.get(name)
        if noise is None and not full:  # a half-precision gradient whose rounding could not be measured
            tol = cap
        else:
            tol = max(base, min(NOISE_FACTOR * (noise or 0.0), cap))
        grads = [g.get(name) for g in per_rank]
        numel = ref.numels.get(name) or next((g.numel() for g in (g_ref, *grads) if g is not None), 0)
        if g_ref is None and all(g is None for g in grads):
            rows.append(ParamRow(name, numel, [ParamComparison(name, None, None, tol, flags=[Flag.MISSING])] * len(grads),
                                 None, None, tol, no_grad=True))
            continue
        comparisons = [_compare(name, g_ref, g, tol, ref.norm) for g in grads]
        rows.append(ParamRow(name, numel, comparisons, _spread(grads), _scale(g_ref, grads[0]), tol))
    norms = Norms(ref.norm, [r.full_norm for r in runs], [r.shard_norm for r in runs])
    first = runs[0]
    return Comparison(
        rows, norms, [r.loss for r in runs], [r.no_grad for r in runs],
        skipped=next((r.skipped for r in runs if r.skipped), None),
        ddp_error=next((r.ddp_error for r in runs if r.ddp_error), None),
        init_digests=[r.init_digest for r in runs], batchnorms=first.batchnorms, bytes_reduced=first.bytes_reduced,
        steps=[r.step for r in runs],
    )


def _compare(name: str, g_ref: torch.Tensor | None, g: torch.Tensor | None, tol: float, ref_norm: float) -> ParamComparison:
    judged = compare_gradient(name, g_ref, g, tol)
    if judged.agrees or g_ref is None or g is None:
        return judged
    # A gradient that is zero up to rounding (a bias before a BatchNorm: exactly 0 in exact
    # arithmetic) has no relative error to speak of: it agrees when both sides are that small
    # next to the model's whole gradient.
    floor = tol * ref_norm
    if float(g_ref.double().norm()) <= floor and float(g.double().norm()) <= floor:
        judged.flags = [Flag.AGREES]
    return judged


def _spread(grads: list[torch.Tensor | None]) -> float | None:
    """max over ranks of ‖g_r − g_0‖/‖g_0‖; inf when some ranks have a gradient and others none."""
    if all(g is None for g in grads):
        return None
    if any(g is None for g in grads):
        return math.inf
    base = grads[0].double()
    size = float(base.norm())
    gaps = [float((g.double() - base).norm()) for g in grads[1:]]
    return max((gap / size if size else gap for gap in gaps), default=0.0)


def _scale(g_ref: torch.Tensor | None, g: torch.Tensor | None) -> float | None:
    """The least-squares multiple s with g ≈ s·g_ref (1 when they agree, 1/N for a sum loss)."""
    if g_ref is None or g is None:
        return None
    r, c = g_ref.double().flatten(), g.double().flatten()
    denom = float(r @ r)
    return float(r @ c) / denom if denom else None

