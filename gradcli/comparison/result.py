"""The outcome of `compare`: every parameter's gradient in the candidate setup against the
reference's, where the difference starts, and why, from evidence.

    result = gradcli.compare(model, x, loss=lambda out: out.pow(2).mean(), compile=True)
    assert result.ok, result

Data only (outcome.py's protocol): the words live in render/training/compare.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from ..outcome import Problem, Reported, sentence
from ..words import problem_sentences
from .gradients import Flag, ParamComparison, _json_number
from .setup import Setup
from .side import ScalerStep

CauseKind = Literal["random-ops", "underflow", "amplified", "bfloat16-reduction", "graph-breaks", "capture", "scaler-gave-up"]


@dataclass
class Cause:
    """Why the candidate differs, with the evidence: what was rerun and what it showed."""

    kind: CauseKind
    detail: dict[str, Any] = field(default_factory=dict)  # JSON-ready numbers and names

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.detail}


@dataclass
class Divergence:
    """The first module, in backward order, whose input gradient leaves tolerance."""

    module: str
    module_class: str
    grad_rel_err: float
    tolerance: float
    forward_rel_err: float | None  # its output, candidate against reference (None: not comparable)
    forward_differs: bool  # the forward output already differed here: a forward divergence
    first_forward: str | None = None  # the first module, in forward order, whose output differed
    file: str | None = None
    line: int | None = None
    code: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "module": self.module, "module_class": self.module_class, "grad_rel_err": _json_number(self.grad_rel_err),
            "tolerance": self.tolerance, "forward_rel_err": _json_number(self.forward_rel_err),
            "forward_differs": self.forward_differs, "first_forward": self.first_forward,
            "file": self.file, "line": self.line, "code": self.code,
        }


@dataclass
class CompareResult(Reported):
    """Candidate against reference, parameter by parameter."""

    model: str
    setup: Setup
    parameters: list[ParamComparison]
    modules: dict[str, str]  # parameter name -> its module's path
    module_types: dict[str, str]  # module path -> class name
    reference_loss: float
    candidate_loss: float
    factor: float  # Tolerance.factor the tolerances were made with
    first_divergence: Divergence | None = None
    causes: list[Cause] = field(default_factory=list)
    scaler_steps: list[ScalerStep] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    target: str | None = None  # the CLI's TARGET text
    found: str | None = None
    seed: int | None = None

    @property
    def loss_disagrees(self) -> bool:
        """One side's loss is nan or inf and the other's finite: the candidate does not compute
        the reference's loss, even when the gradients agree (float16's inf - inf is nan, while
        the two sums' gradients cancel before anything overflows)."""
        return math.isfinite(self.reference_loss) != math.isfinite(self.candidate_loss)

    @property
    def problems(self) -> list[Problem]:
        loss = [Problem("loss-differs", "loss", {"reference": _json_number(self.reference_loss),
                                                 "candidate": _json_number(self.candidate_loss)})] if self.loss_disagrees else []
        return loss + [
            Problem(f"gradient-{flag.value.lower()}", p.name, {"flag": flag.value, "rel_err": p.rel_err, "tolerance": p.tolerance})
            for p in self.parameters for flag in p.flags if flag is not Flag.AGREES
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "target": self.target, "model": self.model, "seed": self.seed,
            "candidate": self.setup.describe(),
            "setup": {"compile": self.setup.compile, "backend": self.setup.backend if self.setup.compile else None,
                      "mode": self.setup.mode, "amp": self.setup.amp, "scaler": self.setup.scaler,
                      "dtype": self.setup.dtype, "reference": self.setup.reference, "precision": self.setup.precision},
            "loss": {"reference": _json_number(self.reference_loss), "candidate": _json_number(self.candidate_loss)},
            "tolerance_factor": self.factor,
            "parameters": [{**p.as_dict(), "module": self.modules.get(p.name, "")} for p in self.parameters],
            "first_divergence": self.first_divergence.as_dict() if self.first_divergence else None,
            "causes": [c.as_dict() for c in self.causes],
            "scaler": [{"scale": s.scale, "skipped": s.skipped} for s in self.scaler_steps],
            "problems": problem_sentences(self.problems),
            "notes": list(self.notes),
        }


@sentence(*(f"gradient-{flag.value.lower()}" for flag in Flag if flag is not Flag.AGREES))
def _gradient(p: Problem) -> str:
    """A parameter's gradient against the reference."""
    d = p.detail
    if d["rel_err"] is None:
        return f"{p.subject}: {d['flag']}: a gradient only one side has"
    if d["rel_err"] > d["tolerance"]:
        return f"{p.subject}: {d['flag']}: rel err {d['rel_err']:.2g} > tolerance {d['tolerance']:.2g}"
    return f"{p.subject}: {d['flag']}: rel err {d['rel_err']:.2g} (tolerance {d['tolerance']:.2g})"


@sentence("loss-differs")
def _loss_differs(p: Problem) -> str:
    """The losses disagree: one side's is nan or inf, the other's finite."""
    said = {side: v if isinstance(v, str) else f"{v:.6g}" for side, v in p.detail.items()}  # "nan", "inf", "-inf"
    return f"loss: DIFFERS: the candidate's loss is {said['candidate']} where the reference's is {said['reference']}"
