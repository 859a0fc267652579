"""`gradcli check`'s elementwise mode: every point compared, each on its own.

An expression of elementwise operations (and a final sum or mean of one) is a function of
one point at a time, so its derivative is compared at every point given or drawn (up to
limits.MAX_ELEMENTS) with sympy's, 50 digits deciding where float64 is in doubt
(evaluation.py); a library entry's published derivative is compared too. The causes of
wrong or non-finite gradients are named per group of points (verify/causes/at_points.py), and gradcheck runs
on a spaced sample of the points kept (verify/expression/gradcheck_runs.py).
"""

from __future__ import annotations

from typing import Any

import torch

from ...graph.values import all_finite
from ...errors import DomainError
from ...exact.boundaries import near_boundaries
from .gradcheck_runs import gradchecks_elementwise
from ...exact.compare import compare
from ...exact.evaluation import evaluate
from .published import published_values
from .context import CheckContext
from .result import CheckResult
from ...exact.symbolic import simplify_all


def check_elementwise(check: CheckContext, pts: dict[str, torch.Tensor], simplify: bool) -> None:
    """Compare autograd with the exact derivative at every point of `pts`, then gradcheck."""
    result, program, plan, library, device = check.result, check.program, check.plan, check.library, check.device
    names = check.names
    size = next(iter(pts.values())).numel() if pts else 1
    ev = evaluate(program, plan, library, pts, order=result.order, dtype=result.dtype, device=device,
                  seed=result.seed or 0, **result.tolerance())
    if ev.autograd_error is not None:
        result.autograd_error = ev.autograd_error
        return
    rounded = ev.points  # the points as the dtype holds them, evaluated there: one copy, shared
    result.points = rounded
    # all_finite (one aminmax) first: a bool per element and its sum cost 0.17 s on 10^7 points
    result.autograd_nonfinite = sum(0 if all_finite(v) else int((~torch.isfinite(v)).count_nonzero()) for v in ev.autograd.values())
    if ev.symbolic_skipped is not None:
        result.symbolic_skipped = f"{ev.symbolic_skipped}; gradcheck still runs"
    if ev.targets is not None and ev.formulas is not None:
        targets = ev.targets
        _show(result, ev.formulas.first, ev.formulas.second, simplify)
        first = [targets[n] for n in names]
        if names and all(bool(t.undefined.all()) for t in first):
            raise DomainError(
                f"the derivative is undefined at every one of the {size:,} points (outside the domain of the "
                "function or of its derivative)",
                hint="give values inside the domain with --var, e.g. --var 'x=uniform(0.1, 5, 1000)'",
            )
        _smooth_notes(result, targets, names)
        for key, comparison in ev.comparisons.items():
            (result.variables if isinstance(key, str) else result.second).append(comparison)
        if result.variables and all(c.points == 0 for c in result.variables) and any(c.kinks for c in result.variables):
            # "OK ... (0 values)" would pass a check that compared nothing, as a domain miss does not
            raise DomainError(
                f"nothing to compare: every one of the {size:,} points is at a kink of the derivative (or outside "
                "the domain), where autograd is not compared",
                hint="give points beside the kink too, e.g. --var 'x=linspace(-1, 1, 21)'",
            )
        if plan.entry is not None and plan.entry.derivative is not None and result.order >= 1:
            value = published_values(plan.entry, plan.entry_call, rounded[names[0]], library)
            result.published.append(
                compare(value, targets[names[0]], candidate_name="published",
                        largest=float(torch.finfo(torch.float64).max), seed=result.seed or 0, **result.tolerance())
            )
        result.causes = _causes(check, rounded, ev)
        keep = ~ev.outside & ~ev.near_kink
        for t in first:
            keep &= ~t.undefined if all_finite(t.reference) else ~t.undefined & torch.isfinite(t.reference)
        gradchecks_elementwise(check, rounded, keep, (targets, size))
        return
    near = near_boundaries(program, library, rounded, size)
    if bool(near.any()):
        result.notes.append(
            f"{int(near.count_nonzero()):,} of {size:,} points are at or next to a branch boundary or a kink "
            "(found with torch, the symbolic side being skipped): kept out of finite differences"
        )
    gradchecks_elementwise(check, rounded, ~near)


def _smooth_notes(result: CheckResult, targets: dict[Any, Any], names: list[str]) -> None:
    """Say where a branch boundary was compared because its derivative exists (the reader
    would otherwise expect it counted as a kink)."""
    from ...exact.smooth_boundaries import describe
    from ..causes.at_points import PointWords

    words = PointWords(result.points)
    for name in names:
        if targets[name].smooth:
            result.notes.append(describe(name, targets[name].smooth, words.label))


def _causes(check: CheckContext, rounded: dict[str, torch.Tensor], ev: Any) -> list[Any]:
    """Why autograd is wrong or not finite where it is (causes/at_points.py)."""
    from ..causes.at_points import find_causes

    if _nothing_to_explain(check.result, ev):
        return []

    return find_causes(check.plan.body, check.library, rounded, ev.autograd, ev.targets, dtype=check.dtype,
                       source=check.program.source, outside=ev.outside, **check.result.tolerance())


def _nothing_to_explain(result: CheckResult, ev: Any) -> bool:
    """Whether every autograd value is finite and right: each point where it disagrees with the
    float64 exact value was decided at 50 digits (none left unarbitrated, none beyond the
    dtype's range) and found right, and none is where the formula cancels. find_causes would
    then classify every point again, look up the same disputed points (the same `sample`) and
    find nothing: 0.7 s and the check's peak memory on 10^7 points, where the float64 formula
    of x*sigmoid(x) is off at one point."""
    if result.autograd_nonfinite:
        return False
    for key, target in ev.targets.items():
        judged = ev.comparisons.get(key)
        if judged is None or judged.wrong or judged.not_arbitrated or judged.beyond_range:
            return False
        if target.suspect is not None and bool(target.suspect.any()):
            return False
    return True


def _show(result: CheckResult, first: dict[Any, Any], second: dict[Any, Any], simplify: bool) -> None:
    import sympy

    shown = simplify_all({**first, **second}) if simplify else {**first, **second}
    for key, expr in shown.items():
        if isinstance(key, str):
            result.symbolic[key] = sympy.sstr(expr)
            try:
                result.pretty[key] = sympy.pretty(expr, use_unicode=True, wrap_line=False)
            except Exception:  # noqa: BLE001 - sympy's pretty printer fails on some ITE forms
                pass  # the renderer falls back to the plain form
        else:
            result.symbolic_second[",".join(key)] = sympy.sstr(expr)
