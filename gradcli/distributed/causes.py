"""Why N ranks' gradients differ from one process's, from the evidence of the first run; each
cause is then proven (or not) by rerunning the user's model on the same ranks with its fix.

| cause | evidence | fix rerun |
|---|---|---|
| BatchNorm statistics per rank | BatchNorm layers, gradients differ | whole-batch statistics (SyncBatchNorm) |
| loss reduced with sum | every gradient is the reference times exactly 1/N | the loss times N |
| parameters unused on a rank | no gradient on a rank's shard; DDP's next forward raises | find_unused_parameters=True |
| initial weights differ | the ranks' weight fingerprints differ | rank 0's weights broadcast first |
| accumulation off by the step count | every gradient is the reference times exactly K (K micro-steps' mean losses add up) | each micro-step's loss divided by K |
| norm clipping on shards | the step scaled each rank's shard by its own factor, which takes that shard's norm (not the whole gradient's) to the same maximum | clip_grad_norm_ over the whole (DTensor) gradients, at that maximum |
"""

from __future__ import annotations

import math
from typing import Callable

from .result import Cause, CauseKind, Comparison
from .setup import Fix, Setup
from .step import StepEffect

#: How close to exactly 1/N (or K) the scale of every gradient comes (float32 rounding); a
#: gradient judged at a looser tolerance (a bfloat16 model's own rounding) may come that close.
SCALE_SLACK = 1e-4
#: How close the maximum norms the ranks clipped their shards to must be to one another (the
#: clipping's eps, 1e-6 added to the norm, and float32 rounding).
NORM_SLACK = 1e-4
#: clip_grad_norm_'s factor is max_norm / (norm + 1e-6): the maximum is recovered with the same eps.
CLIP_EPS = 1e-6


def suspects(run: Comparison, setup: Setup, reference_step: StepEffect | None = None) -> list[Cause]:
    """The causes the first run's evidence points at, most definite first (none when the run
    agrees: differing initial weights under DDP, say, are harmless, as DDP broadcasts rank 0's)."""
    found: list[Cause] = []
    world = setup.world
    if run.clean:
        return found
    unused = sorted({n for names in run.no_grad for n in names})
    if unused and (run.skipped or run.ddp_error or run.unsynced):
        by_rank = {str(r): names for r, names in enumerate(run.no_grad) if names}
        everywhere = [n for n in unused if all(n in names for names in run.no_grad)]
        found.append(Cause(CauseKind.UNUSED, unused, {
            "no_grad_by_rank": by_rank, "unused_on_every_rank": everywhere,
            "ddp_error": run.ddp_error.splitlines()[0] if run.ddp_error else None,
            "would_hang": run.skipped is not None,
            "unsynchronised": [r.name for r in run.unsynced],
        }, Fix.FIND_UNUSED))
    if len(set(run.init_digests)) > 1:
        found.append(Cause(CauseKind.INITIAL_WEIGHTS, [], {"fingerprints": run.init_digests}, Fix.BROADCAST))
    if run.differing and run.batchnorms:
        found.append(Cause(CauseKind.BATCHNORM, list(run.batchnorms), {
            "differing": [r.name for r in run.differing],
            "max_rel_err": max(r.worst.rel_err or 0.0 for r in run.differing),
        }, Fix.SYNC_BATCHNORM))
    compared = [r.name for r in run.rows if not r.no_grad]
    scaled = _scale_evidence(run, 1.0 / world)
    if scaled is not None:
        found.append(Cause(CauseKind.SUM_LOSS, compared, scaled, Fix.SCALE_LOSS))
    scaled = _scale_evidence(run, float(setup.accumulate)) if setup.accumulate > 1 else None
    if scaled is not None:
        found.append(Cause(CauseKind.ACCUMULATION, compared, scaled | {"steps": setup.accumulate}, Fix.DIVIDE_BY_STEPS))
    clipped = _clip_evidence(run, reference_step, setup.wrap)
    if clipped is not None:
        found.append(Cause(CauseKind.CLIP_ON_SHARDS, compared, clipped, Fix.CLIP_WHOLE))
    return found


def _scale_evidence(run: Comparison, expected: float) -> dict | None:
    """Every compared gradient is the reference times `expected`, up to rounding."""
    rows = [r for r in run.rows if not r.no_grad and r.scale is not None]
    if not run.differing or not rows:
        return None
    residuals = []
    for r in rows:
        rel = r.worst.rel_err or 0.0
        residuals.append(math.sqrt(max(rel * rel - (r.scale - 1.0) ** 2, 0.0)))
    if all(abs(r.scale - expected) <= max(SCALE_SLACK, r.tolerance) * expected for r in rows) and (
            max(residuals) <= max(SCALE_SLACK, rows[0].tolerance)):
        return {"expected_ratio": expected, "ratios": {r.name: r.scale for r in rows}, "max_residual": max(residuals)}
    return None


def _clip_evidence(run: Comparison, reference: StepEffect | None, wrap: str) -> dict | None:
    """Each rank's step scaled its own shard by one factor, the factors differ from the one
    process's, and each clipped rank's factor takes its shard's norm to the same maximum M
    (clip_grad_norm_'s rule, min(1, M / ‖g‖), applied to ‖shard‖ instead of ‖g‖)."""
    effects = [e for e in run.steps if e is not None and e.factor is not None and e.uniform]
    if not run.differing or reference is None or reference.factor is None or not reference.uniform or (
            not effects or len(effects) != len(run.steps)):
        return None
    factors = [e.factor for e in effects if e.factor is not None]  # all of them (the filter above)
    ref_factor = reference.factor
    if all(abs(f - ref_factor) <= SCALE_SLACK * ref_factor for f in factors):
        return None  # the step scaled every rank as it scaled one process: not where they differ
    limits = [f * (e.norm_before + CLIP_EPS) for f, e in zip(factors, effects) if f < 1 - SCALE_SLACK]
    if ref_factor < 1 - SCALE_SLACK:
        limits.append(ref_factor * (reference.norm_before + CLIP_EPS))
    if not limits:
        return None
    limit = sum(limits) / len(limits)
    if any(abs(m - limit) > NORM_SLACK * limit for m in limits):
        return None
    unclipped = [e.norm_before for f, e in zip(factors, effects) if f >= 1 - SCALE_SLACK]
    if any(n > limit * (1 + NORM_SLACK) for n in unclipped):
        return None  # a shard over the maximum left alone: not clipping by the shard's norm
    # Clipping by the whole gradient scales each rank by the factor for the norm of the whole
    # gradient it holds: under FSDP2 the norm over every rank's shard; under DDP each rank holds a
    # whole gradient, its own (ranks DDP left unsynchronised hold different ones, and clip each by
    # its own norm: their factors differ, yet no shard was clipped).
    norms = [e.norm_before for e in effects]
    wholes = [math.sqrt(sum(n * n for n in norms))] * len(norms) if wrap == "fsdp" else norms
    by_whole = [min(1.0, limit / (w + CLIP_EPS)) for w in wholes]
    if all(abs(f - b) <= SCALE_SLACK * b for f, b in zip(factors, by_whole)):
        return None
    return {"max_norm": limit, "factors": factors, "shard_norms": norms,
            "reference_factor": ref_factor, "whole_norm": reference.norm_before}


def prove(causes: list[Cause], rerun: Callable[[tuple[Cause, ...]], Comparison]) -> None:
    """Rerun with each cause's fix; if no fix alone makes every gradient agree, all together."""
    for cause in causes:
        after = rerun((cause,))
        cause.proven, cause.after = after.clean, after.summary()
    if len(causes) > 1 and not any(c.proven for c in causes):
        after = rerun(tuple(causes))
        if after.clean:
            for cause in causes:
                cause.proven = True
                cause.after = after.summary() | {"together_with": [c.fix.value for c in causes]}
