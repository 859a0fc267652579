"""The band: how far two runs may drift apart on rounding alone, measured step by step.

The same script run in float32 and in float64 shows, at every step and for every quantity
(the loss, each parameter's gradient and value fingerprints), how far float32's rounding has
carried the run by then: training amplifies a rounding difference as it goes, and this
measures it instead of assuming a constant. The band of a pair is that measured drift, scaled
from float32's unit roundoff to the narrower precision of the pair (bfloat16's is 2^16 times
float32's), plus a floor of a few unit roundoffs of the value itself (the two measured runs may
agree exactly at a step by chance), times compare's factor (comparison/gradients.py):

    band = factor * (u(p) / u(float32) * |x_float32 - x_float64| + u(p) * |x_float64|)

XXX: a pair of float32 and float64 is measured by itself: its band is its own gap times the
factor, so it only parts on data, non-finite values or skipped steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..comparison.gradients import Tolerance

#: Unit roundoff of each precision (comparison/gradients.py's UNIT_ROUNDOFF, without torch).
UNIT = {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}
FACTOR = Tolerance.factor


@dataclass(frozen=True)
class Band:
    """The band of one pair: its precision, and the factor over the measured drift."""

    precision: str  # the narrower of the pair's
    factor: float = FACTOR

    @property
    def unit(self) -> float:
        return UNIT[self.precision]

    @property
    def ratio(self) -> float:
        return max(self.unit / UNIT["float32"], 1.0)

    def of(self, float32: Sequence[float], float64: Sequence[float]) -> float:
        """The band of one fingerprint (or loss) from its float32 and float64 values at one step."""
        drift = gap(float32, float64)
        scale = abs(float64[0]) if math.isfinite(float64[0]) else 0.0
        if not math.isfinite(drift):
            drift = 0.0  # a non-finite reference measures nothing
        return self.factor * (self.ratio * drift + self.unit * scale)

    def as_dict(self) -> dict[str, object]:
        return {"measured_by": "the script in float32 against the script in float64, step by step",
                "precision": self.precision, "unit_roundoff": self.unit, "scale": self.ratio, "factor": self.factor}


def narrower(a: str, b: str) -> str:
    return a if UNIT[a] >= UNIT[b] else b


def gap(x: Sequence[float], y: Sequence[float]) -> float:
    """The largest difference between two fingerprints; inf when one is finite and the other not."""
    worst = 0.0
    for u, v in zip(x, y):
        if math.isfinite(u) and math.isfinite(v):
            worst = max(worst, abs(u - v))
        elif math.isfinite(u) != math.isfinite(v):
            return math.inf
    return worst


def ratio(gap_: float, band: float) -> float:
    """How many bands apart (above 1: parted)."""
    if gap_ == 0:
        return 0.0
    return gap_ / band if band > 0 else math.inf
