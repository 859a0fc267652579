"""The rounding a forward's outputs carry: float64's, or a coarser grid it computed on.

check-function differentiates in float64 with a step of 1e-6, which is right for a forward
that computes in float64. A forward that computes inside in float32 (or half precision: a
kernel that only has float32, `x.float()` for speed) and returns float64 leaves its outputs
on the float32 grid, whose rounding (about 6e-8 of the value) divided by the step is a few
per cent of the derivative: the central difference is noise there, and so is the gap between
one-sided differences that would otherwise mark a kink. The grid is read off the values
themselves: outputs at x ± 1e-6 that all lie exactly on the float32 grid came from float32.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .gradchecks import GradcheckVerdict
from .jacobian import EPS, InputCheck, disagree, flat_output

#: The coarser grids a float64 output may lie on, coarsest first.
COARSER = (torch.float16, torch.bfloat16, torch.float32)


def grid(*values: torch.Tensor) -> torch.dtype:
    """The coarsest floating dtype on whose grid every finite value lies (float64 if none
    coarser holds them all). Values that are all small integers (a piecewise-constant or
    integer forward) lie on every grid and tell nothing: float64 then."""
    flat = torch.cat([v.detach().to(torch.float64).reshape(-1) for v in values])
    flat = flat[torch.isfinite(flat)]
    if flat.numel() == 0 or bool((flat == flat.round()).all()):
        return torch.float64
    for dtype in COARSER:
        if bool((flat.to(dtype).to(torch.float64) == flat).all()):
            return dtype
    return torch.float64


def spacing(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The distance from |value| to the next representable number of `dtype`, elementwise,
    in float64 (torch.finfo(dtype).eps scaled to the value's binade)."""
    magnitude = value.detach().to(torch.float64).abs()
    tiny = torch.finfo(dtype).tiny
    exponent = torch.floor(torch.log2(torch.clamp(magnitude, min=tiny)))
    return torch.finfo(dtype).eps * torch.exp2(exponent)


#: The step, relative to max(1, |x|), of the difference that replaces gradcheck's where the
#: forward is on a coarser grid: float32's rounding over it is a few in 1e5 of the slope, and
#: a central difference's own error over it (step² f'''/6) a few in 1e7 for tanh or exp.
#: verify/function/settle.py also steps this far to tell a flat forward from one rounding a 1e-6 step away.
LONG_STEP = 1e-3


def coarse_grid_expected(fn: Any, tensors: dict[str, torch.Tensor], got: dict[str, torch.Tensor],
                         expected: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], int, str]:
    """`expected` (central differences over 1e-6, jacobian.py's `numerical`) with each entry
    that disagrees with `got` where the forward's outputs at x ± 1e-6 lie on a coarser grid
    than float64 replaced by the central difference over LONG_STEP; with how many were
    replaced and the coarsest grid met ("float32")."""
    replaced, coarsest = 0, torch.float64
    expected = {name: e.clone() for name, e in expected.items()}
    with torch.no_grad():
        for name, block in expected.items():
            flat = tensors[name].detach().reshape(-1)
            bad = disagree(got[name], block)
            for j in bad.any(dim=0).nonzero().flatten().tolist():
                near = [moved_output(fn, tensors, name, flat, j, sign * EPS) for sign in (1, -1)]
                rows = bad[:, j]
                dtype = grid(*(n[rows] for n in near))
                if dtype == torch.float64:
                    continue
                step = LONG_STEP * max(1.0, abs(float(flat[j])))
                plus, minus = (moved_output(fn, tensors, name, flat, j, sign * step) for sign in (1, -1))
                block[rows, j] = ((plus - minus) / (2 * step))[rows]
                replaced += int(rows.sum())
                coarsest = dtype if torch.finfo(dtype).eps > torch.finfo(coarsest).eps else coarsest
    return expected, replaced, str(coarsest).removeprefix("torch.")


def moved_output(fn: Any, tensors: dict[str, torch.Tensor], name: str, flat: torch.Tensor, j: int,
           by: float) -> torch.Tensor:
    """fn's flat output (float64) with element j of `name` moved by `by`."""
    moved = flat.clone()
    moved[j] += by
    return flat_output(fn, {**tensors, name: moved.reshape(tensors[name].shape)}).to(torch.float64)


def coarse_grid_reason(dtype: str) -> str:
    """Why gradcheck's differences were replaced, as counted in its verdict."""
    return (f"the forward rounds to {dtype} inside: that rounding over the step of 1e-6 exceeds the tolerance, "
            f"a difference over {LONG_STEP:g} decides")


def settle_coarse_grid(verdict: GradcheckVerdict, checks: Sequence[InputCheck], replaced: int,
                       dtype: str) -> GradcheckVerdict:
    """gradcheck compares the same Jacobian with the short step: when it failed but the
    comparison with the longer step where the forward is on a coarser grid finds nothing
    wrong, its failure is those entries', counted as unreliable (as kinks.py's are)."""
    mismatch = (verdict.message or "").startswith("Jacobian mismatch")
    if verdict.ok is not False or not mismatch or not replaced or not checks or not all(c.ok for c in checks):
        return verdict
    why = coarse_grid_reason(dtype)
    message = f"it failed only at {replaced:,} Jacobian entr{'ies' if replaced != 1 else 'y'} where {why}"
    return GradcheckVerdict(True, verdict.fast_mode, message, verdict.points, replaced, {why: replaced})
