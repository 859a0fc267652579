"""The outcome of `grads`: one row per parameter, in forward order, with its findings.

    result = gradcli.grads(model, x, loss=lambda out: out.pow(2).mean())
    assert result.ok, result

Plain data: the renderers (table, JSON, plot) read it and the words of every finding are
chosen once, in verdicts.py. `gradcli.grads` returns it as gradcli/api.py's `Grads`, which
adds `str()`, `.to_json()` and `.plot()` one layer up (health/ never imports the renderers). `ok` is False when a parameter that should learn gets no
gradient or a non-finite one, or the loss itself is nan or inf; `strict` adds ZERO, VANISHING
and EXPLODING.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..outcome import Problem, Reported, sentence
from ..targets.base import Origin
from ..words import problem_sentences
from .flags import FAILING, FLAG_ORDER, Flag
from .param import Finding, ParamHealth, parameter_data, source_data
from .table import grads_rows

__all__ = ["Finding", "GradsResult", "NonfiniteOrigin", "ParamHealth", "StepsRecord"]


@dataclass
class NonfiniteOrigin:
    """Where a nan or inf appeared: the first forward operation whose output was non-finite,
    and the first backward node whose gradient was."""

    forward_op: str | None = None
    forward_source: Origin | None = None
    forward_in_loss: bool = False  # the operation ran in the loss, not in the model
    backward_node: str | None = None
    backward_source: Origin | None = None
    backward_in_loss: bool = False
    # issue 24: the first value was an inf the user wrote (masked_fill(m, -inf)), not an overflow,
    # and the nan was born later, in a softmax of rows -inf throughout; the fixes tried on the model
    forward_kind: str | None = None  # "nan" or "inf"
    forward_written: bool = False
    nan_op: str | None = None
    nan_source: Origin | None = None
    nan_masked_rows: int | None = None
    fixes: list[Any] = field(default_factory=list)  # verify/causes/masked_rows.py's FixOutcome


@dataclass
class StepsRecord:
    """--steps N --lr LR: plain SGD on the same batch, on a copy of the model."""

    count: int
    lr: float
    losses: list[float]


@dataclass
class GradsResult(Reported):
    """Every parameter's gradient health, in forward order, and the thresholds used
    (outcome.py's protocol: `ok`, `problems`, `notes`, `as_dict()`)."""

    model: str  # the model's class name
    loss: float
    params: list[ParamHealth]
    thresholds: Thresholds
    median_ratio: float | None  # the model's median ‖grad‖/‖param‖, the relative yardstick
    strict: bool = False
    origin: NonfiniteOrigin | None = None
    steps: StepsRecord | None = None
    notes: list[str] = field(default_factory=list)
    module_types: dict[str, str] = field(default_factory=dict)  # every module's path -> class name
    error: str | None = None  # backward raised (an autograd error): torch's message
    target: str | None = None  # `model.py:Net` when run from the command line
    found: str | None = None  # what the target's NAME turned out to be, in words
    seed: int | None = None  # the seed of initialisation, inputs and forward (command line)
    depth: int | None = None  # --depth: modules deeper than this are summarised in one row
    #: The loss is nan or inf while every gradient is finite (verdicts.py's nonfinite_loss_finding).
    loss_finding: Finding | None = None

    @property
    def judged(self) -> list[ParamHealth]:
        """The parameters that should learn (frozen ones left out)."""
        return [p for p in self.params if not p.frozen]

    @property
    def frozen(self) -> list[ParamHealth]:
        return [p for p in self.params if p.frozen]

    def failing(self, flag: Flag) -> bool:
        return self.strict or flag in FAILING

    @property
    def problems(self) -> list[Problem]:
        """One record per failing finding (its sentence, below: `name: FLAG: reason`)."""
        found = [Problem("backward-raised", "", {"message": self.error})] if self.error else []
        if self.loss_finding is not None:
            found.append(Problem("nonfinite-loss", "loss", {"value": str(self.loss), "reason": self.loss_finding.reason}))
        for flag in FLAG_ORDER:
            if not self.failing(flag):
                continue
            for param in self.judged:
                for finding in param.findings:
                    if finding.flag == flag:
                        found.append(Problem("finding", param.name, {"flag": flag, "reason": finding.reason}))
        return found

    @property
    def warnings(self) -> list[str]:
        """Findings that do not fail without strict."""
        return [
            f"{p.name}: {f.flag}: {f.reason}"
            for flag in FLAG_ORDER if not self.failing(flag)
            for p in self.judged for f in p.findings if f.flag == flag
        ]

    def as_dict(self) -> dict[str, Any]:
        """The `grads --json` document (docs/json.md); `self.depth` folds the module summaries.
        render/trace_json.py writes it (one line per parameter and per module; non-finite
        numbers as the strings "nan", "inf", "-inf", as in trace's document)."""
        origin = self.origin
        return {
            "target": self.target,
            "found": self.found,
            "seed": self.seed,
            "model": self.model,
            "loss": self.loss,
            "ok": self.ok,
            "strict": self.strict,
            "thresholds": asdict(self.thresholds),
            "median_ratio": self.median_ratio,
            "parameters": [parameter_data(p) for p in self.params],
            "modules": [
                {
                    "path": row.path, "type": self.module_types.get(row.path, ""), "numel": row.numel,
                    "grad_norm": row.grad_norm, "ratio": row.ratio, "max_abs": row.max_abs, "mean_abs": row.mean_abs,
                    "zero_share": row.zero_share, "flags": row.findings or [], "steps": row.steps or [],
                }
                for row in grads_rows(self.judged, self.module_types, self.depth) if row.level == 0
            ],
            "nonfinite_origin": None if origin is None else {
                "forward_op": origin.forward_op, "forward_source": source_data(origin.forward_source),
                "forward_in_loss": origin.forward_in_loss, "backward_node": origin.backward_node,
                "backward_source": source_data(origin.backward_source), "backward_in_loss": origin.backward_in_loss,
            },
            "steps": None if self.steps is None else {
                "count": self.steps.count, "lr": self.steps.lr, "losses": self.steps.losses,
            },
            "error": self.error,
            "problems": problem_sentences(self.problems),
            "warnings": self.warnings,
            "notes": self.notes,
        }


@sentence("finding")
def _finding(p: Problem) -> str:
    return f"{p.subject}: {p.detail['flag']}: {p.detail['reason']}"


@sentence("nonfinite-loss")
def _nonfinite_loss(p: Problem) -> str:
    return f"loss: NONFINITE: {p.detail['reason']}"
