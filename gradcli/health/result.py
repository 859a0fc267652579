"""The outcome of `grads`: one row per parameter, in forward order, with its findings.

    result = gradcli.grads(model, x, loss=lambda out: out.pow(2).mean())
    assert result.ok, result

Plain data: the renderers (table, JSON, plot) read it and the words of every finding are
chosen once, in verdicts.py. `gradcli.grads` returns it as gradcli/api.py's `Grads`, which
adds `str()`, `.to_json()` and `.plot()` one layer up (health/ never imports the renderers). `ok` is False when a parameter that should learn gets no
gradient or a non-finite one; `strict` adds ZERO, VANISHING and EXPLODING.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..outcome import Problem, Reported
from ..targets.base import Origin
from .flags import FAILING, FLAG_ORDER, Flag
from .thresholds import Thresholds


@dataclass
class Finding:
    """One flag on one parameter, with the reason in a sentence and the line when known."""

    flag: Flag
    reason: str
    source: Origin | None = None


@dataclass
class ParamHealth:
    """One parameter's gradient after one forward+backward (norms are L2, over all elements)."""

    name: str  # path in the model: encoder.layers.0.linear1.weight
    module: str  # the owning module's path ("" for the model itself)
    module_type: str  # its class name
    shape: tuple[int, ...]
    numel: int
    frozen: bool  # requires_grad=False: listed apart, not judged
    order: int | None  # the forward operation that used it first; None if none did
    param_norm: float
    #: What the gradient is measured against: ‖param‖, or for an all-zero parameter (a
    #: zero-initialised bias) the norm of its module's parameters together.
    reference_norm: float = 0.0
    grad_norm: float | None = None  # None: no gradient (None after backward, or frozen)
    max_abs: float | None = None
    mean_abs: float | None = None
    zero_share: float | None = None  # share of elements exactly 0
    findings: list[Finding] = field(default_factory=list)
    steps: list[float | None] | None = None  # ‖grad‖ at each SGD step (--steps)

    @property
    def ratio(self) -> float | None:
        """‖grad‖/‖param‖: how far one SGD step with lr=1 would move it, relative to its size
        (reference_norm); None without a gradient or when even its module is all zeros."""
        size = self.reference_norm
        if self.grad_norm is None or size == 0 or not math.isfinite(size):
            return None
        return self.grad_norm / size

    @property
    def flags(self) -> list[Flag]:
        return [f.flag for f in self.findings]


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
    nan_source: Source | None = None
    nan_masked_rows: int | None = None
    fixes: list[Any] = field(default_factory=list)  # verify/masked_rows.py's FixOutcome


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
        """One record per failing finding (words.problem_sentence: `name: FLAG: reason`)."""
        found = [Problem("backward-raised", "", {"message": self.error})] if self.error else []
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

    def as_dict(self, depth: int | None = None) -> dict[str, Any]:
        """The `grads --json` document (docs/json.md); `depth` folds the module summaries."""
        from .document import grads_document

        return grads_document(self, depth)

