"""One parameter's gradient health (`ParamHealth`) and its findings, and their JSON parts.

Below result.py and table.py, which both read them: the grads table is enumerated from
these rows, and the report's document is made of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..targets.base import Origin
from .flags import Flag


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


def source_data(source: Any) -> dict[str, Any] | None:
    return None if source is None else {"file": source.file, "line": source.line, "code": source.code}


def finding_data(finding: Finding) -> dict[str, Any]:
    return {"flag": finding.flag, "reason": finding.reason, "source": source_data(finding.source)}


def parameter_data(p: ParamHealth) -> dict[str, Any]:
    return {
        "name": p.name, "module": p.module, "module_type": p.module_type, "shape": list(p.shape),
        "numel": p.numel, "frozen": p.frozen, "order": p.order, "param_norm": p.param_norm,
        "reference_norm": p.reference_norm,
        "grad_norm": p.grad_norm, "ratio": p.ratio, "max_abs": p.max_abs, "mean_abs": p.mean_abs,
        "zero_share": p.zero_share, "flags": p.flags, "findings": [finding_data(f) for f in p.findings],
        "steps": p.steps or [],
    }
