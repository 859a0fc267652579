"""The outcome of `gradcli diverge`: two runs of one script, step by step against the band,
and where and why they part. Data only (outcome.py's protocol): the words live in
render/training/diverge.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..outcome import Problem, Reported, sentence
from ..words import problem_sentences
from .band import Band
from .judge import Phase, StepJudged
from .locate import Where
from .setups import RunSetup

CauseKind = Literal["batches-differ", "hook-after-compile", "random-ops", "overflow", "loss-scale-skip", "batchnorm-per-rank",
                    "gradients-scaled"]


@dataclass
class Cause:
    """Why the runs part, with the evidence the runs recorded."""

    kind: CauseKind
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "evidence": dict(self.detail)}


@dataclass
class DivergeResult(Reported):
    script: str
    a: RunSetup
    b: RunSetup
    band: Band
    steps: list[StepJudged]
    parted_at: StepJudged | None = None
    where: Where | None = None
    cause: Cause | None = None
    located_phase: Phase | None = None  # the phase the located rerun's modules tell (locate.py)
    node: str | None = None  # the operation where a non-finite value was born (the located rerun)
    notes: list[str] = field(default_factory=list)

    @property
    def first_step(self) -> int | None:
        return self.parted_at.step if self.parted_at else None

    @property
    def parted(self) -> Phase | None:
        if self.parted_at is None:
            return None
        return self.located_phase or self.parted_at.phase

    @property
    def problems(self) -> list[Problem]:
        if self.parted_at is None:
            return []
        return [Problem("runs-part", self.where.module if self.where else "", {
            "step": self.first_step, "parted": self.parted, "a": self.a.text, "b": self.b.text})]

    def as_dict(self) -> dict[str, Any]:
        where = self.where
        return {
            "ok": self.ok, "script": self.script, "a": self.a.as_dict(), "b": self.b.as_dict(),
            "steps_run": len(self.steps), "first_step": self.first_step, "parted": self.parted,
            "module": where.module if where else None, "module_class": where.module_class if where else None,
            "node": self.node,
            "line": {"file": where.file, "line": where.line, "code": where.code} if where and where.file else None,
            "cause": self.cause.as_dict() if self.cause else None,
            "band": self.band.as_dict(),
            "series": [s.as_dict() for s in self.steps],
            "problems": problem_sentences(self.problems), "notes": list(self.notes),
        }


@sentence("runs-part")
def _runs_part(p: Problem) -> str:
    d = p.detail
    at = f" at {p.subject}" if p.subject else ""
    return f"the runs under {d['a']} and {d['b']} part at step {d['step']}, in the {d['parted']}{at}"
