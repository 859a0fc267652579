"""Whether the function is defined at a point, decided in exact arithmetic, as written.

Two float64 shortcuts mislead about the domain. sympy rewrites the formula: (x**0.5)**2
becomes x, defined at -1, where the program (the square root of -1) is not. And float64
under- or overflows: sigmoid(-800) is 0.0, so log(sigmoid(x)) looks outside log's domain
there, though its value is -800 and its derivative about 1 (NOTES.md). So where the float64
evidence is in doubt, the program itself is evaluated at the point with DIGITS-digit
numbers, operation by operation as written (the sympy translator fed sympy Floats): an
operation whose value is not real, or a division by zero, makes the point undefined, unless
a where(...) leaves that value unselected.

In doubt are (`doubtful`): points the float64 walk puts outside the domain while torch's
float64 forward is not nan there (genuine domain errors give nan; an edge reached by
rounding gives an infinity), and points where torch's forward is nan while the walk saw
nothing wrong (a rewrite moved the domain). At most DOMAIN_LIMIT of each are decided.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

import torch

from ..interpret.to_sympy import _SympyTranslator
from ..errors import GradcliError
from .arbitrate import sample
from .symbolic import CHUNK

#: Significant digits of the exact evaluation.
DIGITS = 50
#: Most points of each doubtful kind decided per check.
DOMAIN_LIMIT = 2_000


class _PointTranslator(_SympyTranslator):
    """The sympy translator on numbers: a value that is not real becomes nan, which
    propagates like torch's nan and disappears in a where(...) branch not selected; and
    no constant limit applies (exp(800) is an ordinary number at 50 digits)."""

    what = "exact evaluator"

    def _check_constant(self, result: Any, node: Any) -> None:
        for k, value in enumerate(result.flat):
            result.flat[k] = _real(self.sp, value)

    def _check_power(self, left: Any, right: Any, node: Any) -> None:
        # No exponent bound here: the torch builder already refused the program's huge
        # constant powers, and at points every base is a 50-digit Float, never an exact Integer.
        return

    def _call_op(self, op: Any, node: Any) -> Any:
        result = super()._call_op(op, node)
        if isinstance(result, self.np.ndarray) and result.dtype == object:
            for k, value in enumerate(result.flat):
                result.flat[k] = _real(self.sp, value)
        return result


def _real(sp: Any, value: Any) -> Any:
    if not getattr(value, "is_number", False) or isinstance(value, sp.logic.boolalg.BooleanAtom):
        return value
    if value.has(sp.zoo, sp.nan, sp.oo, -sp.oo) or value.is_extended_real is False:
        return sp.nan
    return value


def defined_at(program: Any, library: Any, point: Mapping[str, Any]) -> bool:
    """Whether every operation of `program` has a real, finite value at `point`: a number per
    variable, or (the exact mode's small tensors) a tensor, every element of it."""
    import sympy

    values = {name: _exact(sympy, value) for name, value in point.items()}
    try:
        # numpy's object loops warn about overflows the 50-digit numbers do not have
        with _digits(), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            result = _PointTranslator(values, library).program(program)
    except (GradcliError, ZeroDivisionError, ValueError, TypeError, OverflowError):
        return False
    for value in getattr(result, "flat", [result]):
        if not getattr(value, "is_number", False) or _real(sympy, value) is sympy.nan:
            return False
    return True


def _exact(sympy: Any, value: Any) -> Any:
    """A float as a DIGITS-digit sympy Float; a tensor as an object array of them."""
    if isinstance(value, torch.Tensor):
        import numpy as np

        flat = [sympy.Float(v, DIGITS) for v in value.detach().to(torch.float64).reshape(-1).tolist()]
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(tuple(value.shape))
    return sympy.Float(value, DIGITS)


class _digits:
    """mpmath's working precision raised to DIGITS for the evaluation."""

    def __enter__(self) -> None:
        import mpmath

        self.saved = mpmath.mp.dps
        mpmath.mp.dps = DIGITS

    def __exit__(self, *exc: Any) -> None:
        import mpmath

        mpmath.mp.dps = self.saved


def forward_nan(program: Any, library: Any, points: Mapping[str, torch.Tensor], size: int) -> torch.Tensor:
    """Where torch's float64 forward of the elementwise `program` is nan (P,)."""
    from ..interpret.to_torch import build

    found = torch.zeros(size, dtype=torch.bool)
    with torch.no_grad():
        for start in range(0, max(size, 1), CHUNK):
            part = {n: v[start:start + CHUNK] for n, v in points.items()}
            out = torch.as_tensor(build(program, part, library=library).output, dtype=torch.float64)
            found[start:start + CHUNK] = torch.isnan(out).expand(min(CHUNK, size - start)) if out.numel() == 1 \
                else torch.isnan(out.reshape(-1))
    return found


def doubtful(outside: torch.Tensor, nan: torch.Tensor) -> tuple[list[int], list[int]]:
    """(points the walk puts outside where torch is not nan, points where torch is nan
    that the walk found defined), each at most DOMAIN_LIMIT, evenly spaced."""
    maybe_inside = (outside & ~nan).nonzero().flatten().tolist()
    maybe_outside = (nan & ~outside).nonzero().flatten().tolist()
    return sample(maybe_inside, DOMAIN_LIMIT), sample(maybe_outside, DOMAIN_LIMIT)
