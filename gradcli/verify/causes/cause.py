"""A cause of a wrong or non-finite gradient, as plain data: the one type `check` (causes/)
and `check-function` (function/diagnose.py) both report, under the one JSON key `causes`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

CauseKind = Literal[
    "leaked_branch", "overflow", "inf_minus_inf", "zero_times_inf", "cancellation", "undefined", "unexplained",
    # a user's Function (check-function: verify/function/diagnose.py): what its backward got wrong
    "swapped_gradients", "zero_gradient", "scaled_gradient", "one_sided", "saved_intermediate",
    "not_differentiable",
    "masked_row",
]
@dataclass
class Cause:
    """One reason, for one group of points of one derivative."""

    kind: CauseKind
    derivative: str  # "x", or "x,x" for a second derivative
    points: int  # how many points of the check it covers
    where: dict[str, list[float]]  # variable -> [lowest, highest] over those points
    summary: str  # one sentence, from evidence
    node: str | None = None  # the graph node it points at (grad_fn name)
    source: str | None = None  # the part of the expression that node computes
    factors: list[dict[str, Any]] = field(default_factory=list)  # 0·inf, inf−inf: the two factors
    examples: list[dict[str, Any]] = field(default_factory=list)  # a few points with their values
    rewrite: dict[str, Any] | None = None  # filled by verify/expression/fixes.py when a rewrite is proven

    @property
    def is_bug(self) -> bool:
        return self.kind != "undefined"

    def as_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items()}
        data["is_bug"] = self.is_bug
        return data
