"""One parameter's gradient in a candidate setup against the reference's, judged.

`compare` (torch.compile, autocast, half-precision weights) and the distributed runs (DDP,
FSDP) ask the same question of every parameter: how far is the candidate's gradient from the
eager float32 (or float64) reference, and is the gap one the candidate's arithmetic explains?
Both hand this module two `{name: gradient}` maps and get one `ParamComparison` each back.

The numbers: ‖g − g_ref‖/‖g_ref‖ and max |g − g_ref| in float64; the share of elements that are
exactly zero in the candidate but not in the reference (flushed to zero: underflow), and the
share that are non-finite in the candidate only. The tolerance is `Tolerance.of(...)`: a
multiple of the candidate's unit roundoff, growing with the square root of the reduction
length (rounding errors of a sum of n terms grow like √n when they are independent).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Mapping

import torch


class Flag(str, enum.Enum):
    """What a parameter's comparison found; AGREES alone means nothing is wrong."""

    AGREES = "AGREES"
    DIFFERS = "DIFFERS"
    UNDERFLOW = "UNDERFLOW"  # elements flushed to exactly zero in the candidate only
    OVERFLOW = "OVERFLOW"  # inf/nan in the candidate only
    MISSING = "MISSING"  # a gradient only one side has


#: Most severe first: how several flags (a module's parameters) are summed up in one.
SEVERITY = (Flag.OVERFLOW, Flag.UNDERFLOW, Flag.MISSING, Flag.DIFFERS, Flag.AGREES)


def severity(flag: str) -> int:
    """A flag's (or its value's) place in SEVERITY: 0 is the most severe."""
    return SEVERITY.index(Flag(flag))


#: The unit roundoff (half the machine epsilon) of each precision a candidate may compute in.
UNIT_ROUNDOFF = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.bfloat16: 2.0**-8,
    torch.float16: 2.0**-11,
}


@dataclass(frozen=True)
class Tolerance:
    """The relative error a candidate computing in `dtype` may show on a healthy model:
    `factor * u(dtype) * sqrt(reduction)`, floored at `factor * u(dtype)`."""

    dtype: torch.dtype
    reduction: int = 1
    #: Measured on healthy models (README, "compare's tolerances"): the calibration of `compare`.
    factor: float = 16.0

    @property
    def value(self) -> float:
        return self.factor * UNIT_ROUNDOFF[self.dtype] * math.sqrt(max(self.reduction, 1))


@dataclass
class ParamComparison:
    """One parameter: the candidate's gradient against the reference's."""

    name: str
    rel_err: float | None  # ‖g − g_ref‖/‖g_ref‖ (‖g − g_ref‖ itself when ‖g_ref‖ is 0); None if MISSING
    max_abs_err: float | None
    tolerance: float
    zero_share: float = 0.0  # share of elements exactly 0 in the candidate, above tolerance × max|g_ref| in the reference
    nonfinite_share: float = 0.0  # share of elements inf/nan in the candidate and not in the reference
    flags: list[Flag] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        return self.flags == [Flag.AGREES]

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name, "rel_err": _json_number(self.rel_err), "max_abs_err": _json_number(self.max_abs_err),
            "tolerance": self.tolerance, "zero_share": self.zero_share, "nonfinite_share": self.nonfinite_share,
            "flags": [f.value for f in self.flags],
        }


def _json_number(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def compare_gradient(name: str, reference: torch.Tensor | None, candidate: torch.Tensor | None,
                     tolerance: float, floor: float = 0.0) -> ParamComparison:
    """Judge one parameter's candidate gradient against its reference gradient.

    `floor` is the smallest ‖g_ref‖ the error is relative to: a gradient that is zero in exact
    arithmetic (a convolution's bias before BatchNorm) is rounding noise in the reference, and
    its error relative to that noise means nothing; compare passes a share of the model's
    typical gradient norm (comparison/runs.py)."""
    if reference is None or candidate is None:
        return ParamComparison(name, None, None, tolerance, flags=[Flag.MISSING])
    if reference.shape != candidate.shape:
        raise ValueError(f"{name}: reference gradient {tuple(reference.shape)} vs candidate {tuple(candidate.shape)}")
    with torch.no_grad():
        ref = reference.detach().to("cpu", torch.float64)
        cand = candidate.detach().to("cpu", torch.float64)
        n = max(ref.numel(), 1)
        cand_finite = torch.isfinite(cand)
        ref_finite = torch.isfinite(ref)
        nonfinite_share = int((~cand_finite & ref_finite).sum()) / n
        # Flushed to zero counts where losing the element is beyond the error budget: an element
        # below tolerance × max|g_ref| can round to zero in a healthy sum with cancellation
        # (measured: README, "compare's tolerances").
        ref_abs = torch.where(ref_finite, ref.abs(), torch.zeros((), dtype=torch.float64))
        # A reference of pure rounding noise (below the floor, per element) loses nothing.
        small = tolerance * max(float(ref_abs.max()) if ref_abs.numel() else 0.0, floor / math.sqrt(n))
        zero_share = int(((cand == 0) & (ref_abs > small)).sum()) / n
        both = cand_finite & ref_finite
        diff = torch.where(both, cand - ref, torch.zeros((), dtype=torch.float64))
        ref_norm = float(torch.linalg.vector_norm(torch.where(both, ref, torch.zeros((), dtype=torch.float64))))
        diff_norm = float(torch.linalg.vector_norm(diff))
        max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    if nonfinite_share:
        diff_norm = max_abs = math.inf
    ref_norm = max(ref_norm, floor)
    rel_err = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    flags: list[Flag] = []
    if nonfinite_share:
        flags.append(Flag.OVERFLOW)
    if zero_share and rel_err > tolerance:  # zeros the gradient can lose within tolerance are rounding
        flags.append(Flag.UNDERFLOW)
    if not flags and rel_err > tolerance:
        flags.append(Flag.DIFFERS)
    return ParamComparison(name, rel_err, max_abs, tolerance, zero_share, nonfinite_share, flags or [Flag.AGREES])


def compare_gradients(reference: Mapping[str, torch.Tensor | None], candidate: Mapping[str, torch.Tensor | None],
                      tolerances: Mapping[str, float], floors: Mapping[str, float] | None = None) -> list[ParamComparison]:
    """Every parameter either side names, in the reference's order, then the candidate's extras."""
    names = list(reference) + [n for n in candidate if n not in reference]
    floors = floors or {}
    return [compare_gradient(n, reference.get(n), candidate.get(n), tolerances[n], floors.get(n, 0.0)) for n in names]
