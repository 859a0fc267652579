"""What a watched run found, as plain data (outcome.py's protocol): the stop, if any, and the
findings by step. `as_dict()` is the `--json` document (docs/json.md, "watch")."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..outcome import Problem, Reported, sentence
from ..words import problem_sentences
from .kinds import WORDS, FindingKind

#: Why a run was stopped.
StopKind = Literal["nonfinite_loss", "nonfinite_gradient", "scaler_skips", "spike"]
#: Where the first nan or inf was born.
Phase = Literal["input", "forward", "backward", "weights"]
#: The catalogue of causes a stop can name (docs/causes.md, "watch").
CauseKind = Literal[
    "nonfinite_input", "nonfinite_weights", "log_of_zero", "division_by_zero", "float16_overflow", "overflow",
    "infinite_derivative", "leaked_branch", "zero_times_inf", "inf_minus_inf", "masked_row",
    "custom_backward", "unexplained",
]


@dataclass
class WatchOrigin:
    """The first operation (forward) or node (backward) whose output was nan or inf."""

    phase: Phase
    node: str | None = None  # LogBackward0, or the forward call (`log`)
    module: str | None = None  # the module's path in the model ("" for the model itself)
    module_class: str | None = None
    file: str | None = None
    line: int | None = None
    code: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "node": self.node, "module": self.module, "file": self.file, "line": self.line}


@dataclass
class WatchCause:
    kind: CauseKind
    summary: str  # one sentence from the evidence

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "summary": self.summary}


@dataclass
class Replay:
    """How the origin was found, and what that cost."""

    how: Literal["replayed", "inspected", "reran", "not_replayed"]
    seconds: float = 0.0
    steps: int = 0  # optimizer steps the rerun repeated (0 for an in-process replay)
    why_not: str | None = None  # when not replayed
    what: str | None = None  # what ran again when not the model's calls: a trainer's `training_step`, `compute_loss`

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Stop:
    """The step that was not applied: steps 1..step-1 were."""

    step: int
    kind: StopKind
    optimizer: str
    parameters: list[str]  # the parameters whose gradients were non-finite (all, in order)
    module: str | None  # the module owning the first of them
    loss: float | None
    origin: WatchOrigin | None = None
    cause: WatchCause | None = None
    replay: Replay | None = None
    batch_nonfinite: list[str] = field(default_factory=list)  # model inputs holding nan/inf
    scale: float | None = None  # a GradScaler's scale at the stopped step (None: no scaler)
    fits: float | None = None  # the scale that would keep the step's float16 gradients finite (scaler.py)
    ranks: list[int] | None = None  # under torch.distributed: the ranks whose loss (else gradients) was non-finite
    rows: dict[str, Any] | None = None  # which rows of the batch carry the step (watcher/rows/)

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step, "kind": self.kind, "optimizer": self.optimizer, "parameters": self.parameters,
            "module": self.module, "loss": _number(self.loss), "scale": self.scale, "fits": self.fits,
            "ranks": self.ranks,
            "origin": self.origin.as_dict() if self.origin else None,
            "cause": self.cause.as_dict() if self.cause else None,
            "replay": self.replay.as_dict() if self.replay else None,
            "rows": _numbers(self.rows),
        }

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> "Stop":
        """A stop from `dataclasses.asdict(stop)` (every field, read back from JSON in another
        process: divergence/child.py writes one, divergence/run.py reads it)."""
        parts = {"origin": WatchOrigin, "cause": WatchCause, "replay": Replay}
        return cls(**{key: parts[key](**value) if key in parts and value is not None else value
                      for key, value in fields.items()})


@dataclass
class WatchFinding:
    step: int
    kind: FindingKind
    optimizer: str  # its label ("" for a finding on the whole run)
    parameters: list[str]  # as named_parameters() names them
    module: str | None  # the first of `modules`
    detail: dict[str, Any] = field(default_factory=dict)  # the numbers behind it, from torch
    modules: list[str] = field(default_factory=list)  # as named_modules() names them
    file: str | None = None  # the user's line that did it (or the loop's backward()/step() line)
    line: int | None = None

    @property
    def warning(self) -> bool:
        """Reported without failing the run (kinds.py)."""
        return WORDS[self.kind].warning

    @property
    def code(self) -> str | None:
        """The text of the line, from the file (None when there is none)."""
        if self.file is None or self.line is None:
            return None
        import linecache

        return linecache.getline(self.file, self.line).strip() or None

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "kind": self.kind, "severity": "warning" if self.warning else "finding",
                "optimizer": self.optimizer, "parameters": self.parameters, "module": self.module,
                "modules": self.modules, "file": self.file, "line": self.line, "code": self.code,
                "fix": WORDS[self.kind].fix, **{k: _numbers(v) for k, v in self.detail.items()}}


@dataclass
class WatchResult(Reported):
    """A watched run: how far it went, where it was stopped, what it found."""

    steps: int = 0  # optimizer steps applied (all optimizers together)
    checks: int = 0  # checked steps
    skipped: int = 0  # steps a GradScaler skipped (non-finite gradients under a finite loss)
    optimizers: list[str] = field(default_factory=list)
    stop: Stop | None = None
    findings: list[WatchFinding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    finished: bool = False  # the script (or the with-block) ran to its end
    script: str | None = None

    @property
    def problems(self) -> list[Problem]:
        problems = []
        if self.stop is not None:
            problems.append(Problem("watch-stop", self.stop.optimizer, {"step": self.stop.step, "stop": self.stop.kind}))
        problems += [Problem("watch-finding", ", ".join(f.parameters) or ", ".join(f.modules),
                             {"step": f.step, "finding": f.kind})
                     for f in self.findings if not f.warning]
        return problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "steps": self.steps, "checks": self.checks, "skipped": self.skipped,
            "optimizers": self.optimizers,
            "finished": self.finished, "stop": self.stop.as_dict() if self.stop else None,
            "findings": [f.as_dict() for f in self.findings],
            "problems": problem_sentences(self.problems), "notes": list(self.notes),
        }


#: Why a run was stopped, in a sentence.
_STOPS = {"nonfinite_loss": "the loss was not finite", "nonfinite_gradient": "a gradient was not finite",
          "scaler_skips": "GradScaler skipped step after step (its scale kept halving)",
          "spike": "a spike (--stop-on spike)"}


@sentence("watch-stop")
def _stop_sentence(p: Problem) -> str:
    return f"stopped at step {p.detail['step']} of {p.subject}, before it was applied: {_STOPS[p.detail['stop']]}"


@sentence("watch-finding")
def _finding_sentence(p: Problem) -> str:
    on = f" on {p.subject}" if p.subject else ""
    return f"step {p.detail['step']}: {WORDS[p.detail['finding']].sentence}{on}"


class WatchStop(Exception):
    """Raised at an optimizer's step pre-hook: the step was not applied; `.result` says why."""

    def __init__(self, result: WatchResult) -> None:
        super().__init__(_stop_message(result.stop))
        self.result = result


def _numbers(value: Any) -> Any:
    """_number inside lists and dicts (watcher/rows/' per-sample numbers)."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    return _number(value)


def _stop_message(stop: Stop | None) -> str:
    """The report's short version, so that a traceback alone tells the story: the step, what
    was not finite, where the first nan or inf was born (file:line, module) and why."""
    if stop is None:
        return "gradcli watch stopped the run"
    text = f"gradcli watch stopped the run at step {stop.step} ({stop.kind.replace('_', ' ')})"
    origin = stop.origin
    if origin is not None and origin.file:
        module = f" in {origin.module}" if origin.module else ""
        text += f"; origin {os.path.basename(origin.file)}:{origin.line} ({origin.phase}{module})"
    if stop.cause is not None:
        text += f"; cause {stop.cause.kind}"
    return text


def _number(value: Any) -> Any:
    """A float as JSON can hold it: nan and ±inf become strings."""
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return value
