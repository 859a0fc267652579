"""The outcome of a distributed comparison: every parameter's reduced gradient on every rank
against the one-process reference, the spread between ranks, the gradient norms as a user
would log them, and the causes found, each with the rerun that proves it.

Plain data (outcome.py's protocol): the renderers (render/training/distributed.py) choose the words.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ..comparison.gradients import ParamComparison, _json_number
from ..outcome import Problem, Reported, sentence
from ..words import problem_sentences, short_number
from .setup import Fix
from .step import StepEffect


@dataclass
class ParamRow:
    """One parameter: each rank's reduced gradient against the reference, and between ranks."""

    name: str
    numel: int
    per_rank: list[ParamComparison]  # rank r's gradient vs the reference
    spread: float | None  # max over ranks of ‖g_r − g_0‖/‖g_0‖: 0 when the ranks are in sync
    scale: float | None  # ⟨g_0, g_ref⟩/⟨g_ref, g_ref⟩: the reduced gradient as a multiple of the reference
    tolerance: float
    no_grad: bool = False  # neither the reference nor any rank has a gradient: nothing to compare

    @property
    def worst(self) -> ParamComparison:
        return max(self.per_rank, key=lambda c: -1.0 if c.rel_err is None else c.rel_err)

    @property
    def agrees(self) -> bool:
        return self.no_grad or all(c.agrees for c in self.per_rank)

    @property
    def synced(self) -> bool:
        return self.spread is None or self.spread <= self.tolerance

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "numel": self.numel, "agrees": self.agrees, "synced": self.synced, "no_grad": self.no_grad,
            "spread": _json_number(self.spread), "scale": _json_number(self.scale), "tolerance": self.tolerance,
            "ranks": [c.as_dict() | {"rank": r} for r, c in enumerate(self.per_rank)],
        }


@dataclass
class Norms:
    """The total gradient norm: the reference's, the reduced gradients' (done right: over whole
    gradients), and each rank's over its local shards only (what `p.grad.to_local()` logs)."""

    reference: float
    reduced: list[float]  # per rank
    per_shard: list[float]  # per rank

    def as_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "reduced": self.reduced, "per_shard": self.per_shard}


class CauseKind(str, enum.Enum):
    BATCHNORM = "batchnorm-statistics"
    SUM_LOSS = "sum-loss"
    UNUSED = "unused-parameters"
    INITIAL_WEIGHTS = "initial-weights"
    ACCUMULATION = "accumulation-steps"
    CLIP_ON_SHARDS = "clip-on-shards"


@dataclass
class Cause:
    """Why the reduced gradients differ: what showed it, the fix, and whether rerunning with
    the fix made every gradient agree (`proven`; None when it was not rerun)."""

    kind: CauseKind
    subjects: list[str]  # the parameters or modules it is about
    evidence: dict[str, Any]
    fix: Fix
    proven: bool | None = None
    after: dict[str, Any] = field(default_factory=dict)  # the rerun: worst rel_err, spread, differing names

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "subjects": self.subjects, "evidence": self.evidence, "fix": self.fix.value,
                "proven": self.proven, "after": self.after}


@dataclass
class Comparison:
    """One run on the ranks compared with the reference (the first run, or a rerun with fixes)."""

    rows: list[ParamRow]
    norms: Norms
    losses: list[float]
    no_grad: list[list[str]]  # per rank: parameters without a gradient on that rank's shard
    skipped: str | None = None  # the wrapped backward was not run (it would hang), and why
    ddp_error: str | None = None
    init_digests: list[str] = field(default_factory=list)
    batchnorms: list[str] = field(default_factory=list)
    bytes_reduced: int = 0  # per rank per step
    steps: list[StepEffect | None] = field(default_factory=list)  # per rank: what the step after backward did

    @property
    def differing(self) -> list[ParamRow]:
        return [r for r in self.rows if not r.agrees]

    @property
    def unsynced(self) -> list[ParamRow]:
        return [r for r in self.rows if not r.synced]

    @property
    def clean(self) -> bool:
        return self.skipped is None and self.ddp_error is None and not self.differing and not self.unsynced

    def summary(self) -> dict[str, Any]:
        # A gradient zero up to rounding agrees without a meaningful relative error: left out.
        worst = [e for r in self.rows if not r.no_grad and (e := r.worst.rel_err) is not None
                 and (e <= r.tolerance or not r.agrees)]
        spreads = [r.spread for r in self.rows if r.spread is not None]
        return {"agrees": self.clean, "max_rel_err": _json_number(max(worst, default=0.0)),
                "max_spread": _json_number(max(spreads, default=0.0)),
                "differing": [r.name for r in self.differing], "unsynchronised": [r.name for r in self.unsynced],
                "error": self.ddp_error, "skipped": self.skipped}


@dataclass
class DistributedResult(Reported):
    """`compare --ddp N` / `--fsdp N`: the user's model on N ranks against one process."""

    target: str
    found: str
    model: str
    seed: int
    wrap: str  # "ddp" or "fsdp"
    world: int
    backend: str
    batch: int
    reference_loss: float
    first: Comparison
    causes: list[Cause] = field(default_factory=list)
    model_bytes: int = 0
    accumulate: int = 1  # micro-steps per rank, all but the last under no_sync
    step: str | None = None  # the step between backward and optimizer.step, in words
    reference_step: StepEffect | None = None  # what it did on the one process
    notes: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[Problem]:
        run = self.first
        found: list[Problem] = []
        if run.skipped is not None:  # nothing ran: no gradient to compare
            return [Problem("would-hang", "", {"reason": run.skipped, "no_grad": run.no_grad})]
        if run.ddp_error is not None:
            found.append(Problem("ddp-error", "", {"error": run.ddp_error.splitlines()[0], "no_grad": run.no_grad}))
        for row in run.differing:
            worst = row.worst
            found.append(Problem("rank-gradient-differs", row.name, {
                "rank": row.per_rank.index(worst), "rel_err": _json_number(worst.rel_err),
                "tolerance": row.tolerance, "flags": [f.value for f in worst.flags]}))
        for row in run.unsynced:
            found.append(Problem("unsynchronised", row.name, {"spread": _json_number(row.spread), "tolerance": row.tolerance}))
        return found

    def as_dict(self) -> dict[str, Any]:
        run = self.first
        return {
            "target": self.target, "found": self.found, "model": self.model, "seed": self.seed, "ok": self.ok,
            "wrap": self.wrap, "world": self.world, "backend": self.backend, "batch": self.batch,
            "reference_loss": self.reference_loss, "losses": run.losses,
            "parameters": [r.as_dict() for r in run.rows],
            "grad_norm": run.norms.as_dict(),
            "no_grad": run.no_grad, "skipped": run.skipped, "ddp_error": run.ddp_error,
            "batchnorms": run.batchnorms, "initial_weights_agree": len(set(run.init_digests)) <= 1,
            "bytes_reduced_per_step": run.bytes_reduced, "model_bytes": self.model_bytes,
            "accumulate": self.accumulate, "step": self.step,
            "step_effect": None if self.step is None else {
                "reference": _effect(self.reference_step), "ranks": [_effect(e) for e in run.steps]},
            "causes": [c.as_dict() for c in self.causes],
            "problems": problem_sentences(self.problems),
            "notes": self.notes,
        }


def _effect(effect: StepEffect | None) -> dict[str, Any] | None:
    if effect is None:
        return None
    return {"factor": _json_number(effect.factor), "residual": _json_number(effect.residual),
            "norm_before": _json_number(effect.norm_before)}


@sentence("rank-gradient-differs")
def _rank_gradient_differs(p: Problem) -> str:
    d = p.detail
    return (f"{p.subject}: the reduced gradient differs from one process's (rank {d['rank']}: rel err "
            f"{short_number(d['rel_err'])}, tolerance {d['tolerance']:.2g})")


@sentence("unsynchronised")
def _unsynchronised(p: Problem) -> str:
    return f"{p.subject}: the ranks' reduced gradients differ (spread {short_number(p.detail['spread'])}): not synchronised"


@sentence("ddp-error")
def _ddp_error(p: Problem) -> str:
    return f"DDP raised: {p.detail['error']}"


@sentence("would-hang")
def _would_hang(p: Problem) -> str:
    return "parameters unused on some ranks only: DDP would wait for their gradients forever, so the run was not started"
