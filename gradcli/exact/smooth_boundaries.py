"""At a branch boundary, does the derivative exist? A kink only where the two sides differ.

regions.py marks every point where a condition of `where`/clamp/relu/abs/max changes as a
kink, and a kink is counted, not compared. But a branch boundary is a kink only where the
one-sided derivatives differ: `where(x != 0, sin(x)/x, 1)` is smooth at 0 (its derivative
is 0 there), and autograd's nan at 0 is the where-leak (pytorch issues 68425, 52248, 23395),
exactly the point a user needs checked. So at each boundary point two witnesses that compute
differently are asked, along the one variable the derivative is taken in:

- sympy, exactly: the point's floats as the rationals they are, the function moved to a + h
  and a - h with h a positive symbol (which resolves the condition to the branch each side
  selects), and the one-sided limits of the difference quotients as h -> 0+;
- mpmath, at DIGITS digits: the same quotients at the steps STEPS, from the function as
  written (its own branch at the point itself).

The derivative exists where sympy's two limits are equal and finite and mpmath's quotients on
both sides agree with them (TOLERANCE); the point is then compared with that value, like any
other. Where either witness says otherwise, or gives no answer in its time, the point stays a
kink: a boundary is never compared on weaker evidence than that.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from .arbitrate import DIGITS, mpmath_lambdify

#: Distinct boundary points decided per derivative (more stay kinks, as before).
MOST_POINTS = 20
#: Seconds of sympy for all the boundary points of one check.
BUDGET = 10.0
#: mpmath's one-sided steps: the finer one is compared, the coarser shows the quotient settles.
STEPS = (1e-15, 1e-20)
#: How close mpmath's quotients must come to sympy's limit, relative to (1 + |limit|).
TOLERANCE = 1e-9


@dataclass(frozen=True)
class SmoothBoundary:
    """A branch boundary where the derivative exists: the evidence and its value."""

    index: int  # the point
    value: float  # the derivative there (sympy's limit, rounded to float64)
    limits: tuple[str, str]  # sympy's left and right limits, as text
    quotients: tuple[float, float]  # mpmath's left and right quotients at the finest step


def smooth_boundaries(
    function: Any, symbols: Mapping[str, Any], points: Mapping[str, torch.Tensor], name: str, kink: torch.Tensor,
    deadline: float,
) -> list[SmoothBoundary]:
    """The points of `kink` where d/d`name` of `function` exists, with its value and evidence.

    `points` are the float64 points of the check (one value per variable and point); points
    with the same coordinates are decided once. sympy stops at `deadline` (time.monotonic)."""
    import sympy

    from .symbolic import SymbolicTimeout, within

    order = list(symbols)
    by_point: dict[tuple[float, ...], list[int]] = {}
    for i in kink.nonzero().flatten().tolist():
        by_point.setdefault(tuple(points[n][i].item() for n in order), []).append(i)
    found: list[SmoothBoundary] = []
    numeric = mpmath_lambdify([symbols[n] for n in order], function)
    for coords in list(by_point)[:MOST_POINTS]:
        left_time = deadline - time.monotonic()
        if left_time <= 0:
            break
        exact = {symbols[n]: sympy.Rational(v) for n, v in zip(order, coords)}
        try:
            limits = within(left_time, _limits, function, symbols[name], exact)
        except SymbolicTimeout:
            break
        except Exception:  # noqa: BLE001 - sympy's limit raises many kinds on forms it cannot settle
            continue
        if limits is None:
            continue
        value = float(limits[0].evalf(DIGITS))
        quotients = _quotients(numeric, order.index(name), coords)
        if quotients is None or any(abs(q - value) > TOLERANCE * (1 + abs(value)) for q in quotients):
            continue
        text = (sympy.sstr(limits[0]), sympy.sstr(limits[1]))
        found += [SmoothBoundary(i, value, text, quotients) for i in by_point[coords]]
    return found


def _limits(function: Any, symbol: Any, point: dict[Any, Any]) -> tuple[Any, Any] | None:
    """sympy's left and right limits of the difference quotient in `symbol` at `point`, when
    both are finite, real and equal (None otherwise)."""
    import sympy

    h = sympy.Symbol("h", positive=True)
    others = {s: v for s, v in point.items() if s != symbol}
    f = function.subs(others)
    a = point[symbol]
    at = f.subs(symbol, a)
    if at.has(sympy.Piecewise) or not (at.is_real and at.is_finite):
        return None
    right = sympy.limit((f.subs(symbol, a + h) - at) / h, h, 0, "+")
    left = sympy.limit((at - f.subs(symbol, a - h)) / h, h, 0, "+")
    if not all(side.is_real and side.is_finite for side in (left, right)):
        return None
    gap = sympy.N(left - right, DIGITS)
    if not gap.is_number or abs(gap) > sympy.Float(10) ** (-DIGITS + 10) * (1 + abs(sympy.N(left, DIGITS))):
        return None
    return left, right


def _quotients(fn: Any, position: int, coords: tuple[float, ...]) -> tuple[float, float] | None:
    """mpmath's left and right difference quotients at the finest step (None when the
    function is not real there, or the quotients still move between the two steps)."""
    import mpmath

    with mpmath.workdps(DIGITS):
        args = [mpmath.mpf(c) for c in coords]

        def f(offset: Any) -> Any:
            moved = list(args)
            moved[position] += offset
            value = fn(*moved)
            if isinstance(value, mpmath.mpc):
                if value.imag != 0:
                    raise ValueError("not real")
                value = value.real
            return mpmath.mpf(value)

        try:
            centre = f(0)
            sides = [((centre - f(-mpmath.mpf(s))) / s, (f(mpmath.mpf(s)) - centre) / s) for s in STEPS]
        except (ZeroDivisionError, ValueError, OverflowError, TypeError):
            return None
        if not all(mpmath.isfinite(q) for pair in sides for q in pair):
            return None
        (coarse_left, coarse_right), (left, right) = sides
        # Settled: the finer step moved each quotient by no more than the tolerance allows.
        scale = 1 + abs(left) + abs(right)
        if abs(coarse_left - left) > 1e3 * TOLERANCE * scale or abs(coarse_right - right) > 1e3 * TOLERANCE * scale:
            return None
        return float(left), float(right)


def describe(name: str, smooth: list[SmoothBoundary], label: Any) -> str:
    """The note on the boundaries where d/d`name` was found to exist; `label(index)` names a point."""
    first = smooth[0]
    left, right = first.quotients
    return (
        f"{label(first.index)} is a branch boundary of d/d{name} where the derivative exists: sympy's one-sided "
        f"limits are {first.limits[0]} and {first.limits[1]}, and one-sided differences at {DIGITS} digits "
        f"(step {STEPS[-1]:g}) give {left:.10g} and {right:.10g}; compared there with {first.value:.6g}"
        + (f" ({len(smooth) - 1:,} more such point{'s' if len(smooth) > 2 else ''})" if len(smooth) > 1 else "")
    )
