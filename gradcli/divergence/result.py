"""The outcome of `gradcli diverge`: two runs of one script, step by step against the band,
and where and why they part. Data only (outcome.py's protocol): the words live in
render/training/diverge.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..outcome import Problem, Reported, sentence
from ..watcher.result import Stop
from ..words import problem_sentences
from .band import Band
from .cost import RunCost
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
class RunStop:
    """A run that `gradcli watch` stops (a non-finite step): which run, and watch's own stop
    record (watcher/result.py), found by running the script again to that step under watch."""

    run: Literal["a", "b"]
    setup: RunSetup
    stop: Stop
    checks: int  # the steps watch checked, as watch counts them
    skipped: int  # steps the loss scale skipped
    notes: list[str] = field(default_factory=list)  # watch's notes

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run, "setup": self.setup.text, "step": self.stop.step, "stop": self.stop.as_dict(),
                "notes": list(self.notes)}


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
    stops: list[RunStop] = field(default_factory=list)  # the runs watch stops, a before b
    torch: tuple[str | None, str | None] = (None, None)  # each run's torch version
    costs: tuple[RunCost | None, RunCost | None] = (None, None)  # each run's measured cost per step

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
        # a stop reads as watch's (watcher/result.py's "watch-stop"), the run named with its optimizer
        stops = [Problem("watch-stop", f"{s.stop.optimizer} in run {s.run} ({s.setup.text})",
                         {"step": s.stop.step, "stop": s.stop.kind}) for s in self.stops]
        if self.parted_at is None:
            return stops
        return [*stops, Problem("runs-part", self.where.module if self.where else "", {
            "step": self.first_step, "parted": self.parted, "a": self.a.text, "b": self.b.text})]

    def as_dict(self) -> dict[str, Any]:
        where = self.where
        return {
            "ok": self.ok, "script": self.script,
            "a": {**self.a.as_dict(), "torch": self.torch[0]}, "b": {**self.b.as_dict(), "torch": self.torch[1]},
            "steps_run": len(self.steps), "first_step": self.first_step, "parted": self.parted,
            "module": where.module if where else None, "module_class": where.module_class if where else None,
            "node": self.node,
            "line": {"file": where.file, "line": where.line, "code": where.code} if where and where.file else None,
            "cause": self.cause.as_dict() if self.cause else None,
            "band": self.band.as_dict(),
            "series": [s.as_dict() for s in self.steps],
            "stops": [s.as_dict() for s in self.stops],
            "cost": {"a": self.costs[0].as_dict() if self.costs[0] else None,
                     "b": self.costs[1].as_dict() if self.costs[1] else None},
            "problems": problem_sentences(self.problems), "notes": list(self.notes),
        }


@sentence("runs-part")
def _runs_part(p: Problem) -> str:
    d = p.detail
    at = f" at {p.subject}" if p.subject else ""
    return f"the runs under {d['a']} and {d['b']} part at step {d['step']}, in the {d['parted']}{at}"
