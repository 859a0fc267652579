"""Deciding who is right with high-precision arithmetic.

Where autograd and the float64 value of the symbolic derivative disagree, or either is not
finite, neither can be trusted by itself: `exp(x)/(1 + exp(x))` is nan in float64 for
x > 709.78 although the derivative there is 1 (NOTES.md). The exact formula is then
evaluated with mpmath at DIGITS significant digits, where exp(1000) is an ordinary number,
and that value decides. mpmath costs ~35 us a point, so at most ARBITRATE_LIMIT points are
arbitrated per quantity (evenly spaced through the disagreeing points; the report says so).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

#: Significant digits of the arbitrating evaluation.
DIGITS = 50
#: Most points arbitrated per compared quantity.
ARBITRATE_LIMIT = 20_000

#: Marks a point where the exact derivative is undefined (not real, or a division by 0).
UNDEFINED = None


def exact_function(expr: Any, symbols: Sequence[Any]) -> Callable[..., float | None]:
    """A function of float arguments giving the exact value of `expr` (rounded to a float,
    inf beyond float64's range) or UNDEFINED."""
    import mpmath

    fn = mpmath_lambdify(symbols, expr)

    def exact(*args: float) -> float | None:
        with mpmath.workdps(DIGITS):
            try:
                value = fn(*(mpmath.mpf(a) for a in args))
            except (ZeroDivisionError, ValueError, OverflowError, TypeError):
                return UNDEFINED
            if isinstance(value, mpmath.mpc):
                if value.imag != 0:
                    return UNDEFINED
                value = value.real
            if isinstance(value, bool):
                value = int(value)
            value = mpmath.mpf(value)
            if mpmath.isnan(value):
                return UNDEFINED
            return float(value) if mpmath.isfinite(value) and abs(value) < 1e308 else (
                math.copysign(math.inf, float(mpmath.sign(value)))
            )

    return exact


def mpmath_lambdify(symbols: Sequence[Any], expr: Any) -> Callable[..., Any]:
    """`expr` (tamed for mpmath) as a function of `symbols`' values, evaluated by mpmath.
    lambdify's docstring is not written: it prints the whole formula, which was two thirds of
    lambdify's time on a 25-variable Hessian's 325 entries (0.94 s against 1.62 s)."""
    import sympy

    from .symbolic import tame

    return sympy.lambdify(list(symbols), tame(expr), modules="mpmath", dummify=needs_dummies(list(symbols)),
                          docstring_limit=0)


def needs_dummies(symbols: Sequence[Any]) -> bool:
    """Whether lambdify must rename `symbols` to dummies: only when a name could be taken for
    something else in the generated code (a keyword, a builtin, an mpmath name). Renaming
    rebuilds the whole formula (xreplace), which re-evaluates every sin/cos in it: 0.5 s per
    formula for sin of a 25-term sum, 3 of the 3.5 minutes of a 25-variable order-2 check."""
    import builtins
    import keyword

    import mpmath

    def safe(name: str) -> bool:
        return (name.isidentifier() and not keyword.iskeyword(name) and not hasattr(builtins, name)
                and not hasattr(mpmath, name) and not name.startswith("_"))

    return not all(getattr(s, "is_Symbol", False) and safe(s.name) for s in symbols)


def sample(indices: Sequence[int], limit: int = ARBITRATE_LIMIT) -> list[int]:
    """At most `limit` of `indices`, evenly spaced, always the first and the last."""
    count = len(indices)
    if count <= limit:
        return list(indices)
    step = (count - 1) / (limit - 1)
    return [indices[round(k * step)] for k in range(limit)]
