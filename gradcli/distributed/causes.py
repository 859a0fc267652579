"""Why N ranks' gradients differ from one process's, from the evidence of the first run; each
cause is then proven (or not) by rerunning the user's model on the same ranks with its fix.

| cause | evidence | fix rerun |
|---|---|---|
| BatchNorm statistics per rank | BatchNorm layers, gradients differ | whole-batch statistics (SyncBatchNorm) |
| loss reduced with sum | every gradient is the reference times exactly 1/N | the loss times N |
| parameters unused on a rank | no gradient on a rank's shard; DDP's next forward raises | find_unused_parameters=True |
| initial weights differ | the ranks' weight fingerprints differ | rank 0's weights broadcast first |
"""

from __future__ import annotations

import math
from typing import Callable

from .result import Cause, CauseKind, Comparison
from .setup import Fix

#: How close to exactly 1/N the scale of a sum-reduced loss's gradients comes (float32 rounding).
SCALE_SLACK = 1e-4


def suspects(run: Comparison, world: int, wrap: str) -> list[Cause]:
    """The causes the first run's evidence points at, most definite first (none when the run
    agrees: differing initial weights under DDP, say, are harmless, as DDP broadcasts rank 0's)."""
    found: list[Cause] = []
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
    scaled = _sum_loss_evidence(run, world)
    if scaled is not None:
        found.append(Cause(CauseKind.SUM_LOSS, [r.name for r in run.rows if not r.no_grad], scaled, Fix.SCALE_LOSS))
    return found


def _sum_loss_evidence(run: Comparison, world: int) -> dict | None:
    """Every compared gradient is the reference times 1/N, up to rounding."""
    rows = [r for r in run.rows if not r.no_grad and r.scale is not None]
    if not run.differing or not rows:
        return None
    expected = 1.0 / world
    scales = [r.scale for r in rows]
    residuals = []
    for r in rows:
        rel = r.worst.rel_err or 0.0
        residuals.append(math.sqrt(max(rel * rel - (r.scale - 1.0) ** 2, 0.0)))
    if all(abs(s - expected) <= SCALE_SLACK * expected for s in scales) and max(residuals) <= max(SCALE_SLACK, rows[0].tolerance):
        return {"expected_ratio": expected, "ratios": {r.name: r.scale for r in rows}, "max_residual": max(residuals)}
    return None


def prove(causes: list[Cause], rerun: Callable[[tuple[Fix, ...]], Comparison]) -> None:
    """Rerun with each cause's fix; if no fix alone makes every gradient agree, all together."""
    for cause in causes:
        after = rerun((cause.fix,))
        cause.proven, cause.after = after.clean, after.summary()
    if len(causes) > 1 and not any(c.proven for c in causes):
        after = rerun(tuple(c.fix for c in causes))
        if after.clean:
            for cause in causes:
                cause.proven = True
                cause.after = after.summary() | {"together_with": [c.fix.value for c in causes]}
