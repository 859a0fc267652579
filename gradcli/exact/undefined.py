"""Is the exact derivative really undefined or infinite at a point? Two independent witnesses.

A gradient that is nan or inf where the derivative itself is undefined (log at 0, sqrt at 0,
the norm of a zero vector) is not a bug, and `check` says so with exit 0. That verdict is
only as good as its evidence, so it is asked of two tools that compute differently:

- sympy, exactly: the point's floats are turned into the rationals they are, substituted
  into the derivative (and the function, whose own domain counts: d/dx log(x) = 1/x is
  finite at x = -1, where log is not real), and the result read: zoo, oo, nan or a value
  that is not real. When substitution leaves no number (a form sympy cannot settle), the
  one-sided limits of a one-variable derivative decide.
- mpmath, at DIGITS digits: the same formulas evaluated numerically; a division by zero,
  a complex value or an infinity.

Each says one of `STATES`; the point is truly undefined when both say `undefined` or
`infinite`, and merely beyond the dtype's range (e^800 is finite, no float64 holds it) when
both say so. `verify/causes/at_points.py` keeps a point as "truly undefined" only where they agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

from .arbitrate import DIGITS, mpmath_lambdify

#: "unsettled": the witness gave no answer (sympy timed out or refused the form); it never
#: agrees with anything, so an unanswered question never confirms "truly undefined".
State = Literal["undefined", "infinite", "beyond_range", "finite", "unsettled"]
#: Seconds sympy gets for one point (substitution, then limits).
SYMPY_BUDGET = 2.0


@dataclass(frozen=True)
class Witness:
    """What one tool says of the derivative at one point."""

    state: State
    text: str  # what it computed: "zoo", "1/0", "2.5e+347"

    @property
    def not_finite(self) -> bool:
        return self.state in ("undefined", "infinite")


@dataclass(frozen=True)
class Verdict:
    """sympy's and mpmath's answers at one point, and whether they agree."""

    sympy: Witness
    mpmath: Witness
    value: float | None  # the exact value when both find it finite (then autograd is simply wrong)

    @property
    def agree(self) -> bool:
        if self.sympy.not_finite and self.mpmath.not_finite:
            return True
        return self.sympy.state == self.mpmath.state != "unsettled"

    @property
    def truly_undefined(self) -> bool:
        return self.agree and self.sympy.not_finite


def decide(function: Any, derivative: Any, symbols: Sequence[Any], args: Sequence[float], largest: float) -> Verdict:
    """Both witnesses for `derivative` (and `function`'s own domain) at `args`."""
    mp = _mpmath(function, derivative, symbols, args, largest)
    sy = _sympy(function, derivative, symbols, args, largest)
    value = None
    if sy.state == "finite" and mp.state == "finite":
        value = float(mp.text)
    return Verdict(sy, mp, value)


def _state_of(value: Any, largest: float) -> Witness:
    """A sympy number's state."""
    import sympy

    if value.has(sympy.nan):
        return Witness("undefined", "nan")
    if value.has(sympy.zoo, sympy.oo, -sympy.oo):
        return Witness("infinite", sympy.sstr(value))
    if value.is_extended_real is False:
        return Witness("undefined", f"{sympy.sstr(value.evalf(6))} (not real)")
    number = value.evalf(DIGITS)
    if not number.is_Number:
        return Witness("undefined", sympy.sstr(value))
    if abs(number) > largest:
        return Witness("beyond_range", f"{float(number.evalf(6)) if abs(number) < 1e308 else sympy.sstr(number.evalf(6))}")
    return Witness("finite", repr(float(number)))


def _sympy(function: Any, derivative: Any, symbols: Sequence[Any], args: Sequence[float], largest: float) -> Witness:
    import sympy

    from .symbolic import SymbolicTimeout, tame, within

    exact = {s: sympy.Rational(a) for s, a in zip(symbols, args)}

    def work() -> Witness:
        if function is not None:
            own = function.xreplace(exact)
            if own.is_number:
                state = _state_of(own, float("inf"))
                if state.not_finite:
                    return Witness(state.state, f"the function is {state.text}")
        found = tame(derivative).xreplace(exact)
        if found.is_number:
            return _state_of(found, largest)
        free = list(derivative.free_symbols)
        if len(free) == 1:  # substitution could not settle it: the one-sided limits decide
            (s,) = free
            sides = [sympy.limit(derivative, s, exact[s], d) for d in ("+", "-")]
            if any(side.has(sympy.zoo, sympy.oo, -sympy.oo) for side in sides):
                return Witness("infinite", f"one-sided limits {sympy.sstr(sides[0])}, {sympy.sstr(sides[1])}")
            if sides[0] != sides[1]:
                return Witness("undefined", f"one-sided limits differ: {sympy.sstr(sides[0])}, {sympy.sstr(sides[1])}")
            return _state_of(sides[0], largest)
        return Witness("undefined", f"no number: {sympy.sstr(found)[:60]}")

    try:
        return within(SYMPY_BUDGET, work)
    except SymbolicTimeout:
        return Witness("unsettled", f"not settled within {SYMPY_BUDGET:g} s")
    except (TypeError, ValueError, NotImplementedError) as err:  # sympy refuses the form
        return Witness("unsettled", f"sympy could not evaluate it ({type(err).__name__})")


def _mpmath(function: Any, derivative: Any, symbols: Sequence[Any], args: Sequence[float], largest: float) -> Witness:
    import mpmath

    def value(expr: Any) -> Witness:
        fn = mpmath_lambdify(symbols, expr)
        with mpmath.workdps(DIGITS):
            try:
                found = fn(*(mpmath.mpf(a) for a in args))
            except ZeroDivisionError:
                return Witness("undefined", "a division by zero")
            except (ValueError, OverflowError, TypeError) as err:
                return Witness("undefined", type(err).__name__)
            if isinstance(found, mpmath.mpc):
                if found.imag != 0:
                    return Witness("undefined", f"{mpmath.nstr(found, 6)} (not real)")
                found = found.real
            found = mpmath.mpf(int(found) if isinstance(found, bool) else found)
            if mpmath.isnan(found):
                return Witness("undefined", "nan")
            if mpmath.isinf(found):
                return Witness("infinite", mpmath.nstr(found, 6))
            if abs(found) > largest:
                return Witness("beyond_range", mpmath.nstr(found, 6))
            return Witness("finite", repr(float(found)))

    if function is not None:
        own = value(function)
        if own.not_finite:
            return Witness(own.state, f"the function is {own.text}")
    return value(derivative)
