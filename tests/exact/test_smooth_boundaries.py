"""A branch boundary is a kink only where the one-sided derivatives differ (issue 24, case 1).

`where(x != 0, sin(x)/x, 1)` is smooth at 0; autograd's nan there is the where-leak (pytorch
issues 68425, 52248, 23395). The truths here come from sympy's one-sided limits and mpmath's
50-digit one-sided differences, computed in the test, and from torch's own autograd.
"""

from __future__ import annotations

import math

import mpmath
import pytest
import sympy
import torch

import gradcli

H = sympy.Symbol("h", positive=True)


def _sides(f, a=0):
    """sympy's left and right limits of f's difference quotient at a (f: a sympy Lambda)."""
    at = f(a)
    return (sympy.limit((at - f(a - H)) / H, H, 0, "+"), sympy.limit((f(a + H) - at) / H, H, 0, "+"))


def _mp_sides(f, a=0.0):
    with mpmath.workdps(50):
        step = mpmath.mpf("1e-20")
        a = mpmath.mpf(a)
        return float((f(a) - f(a - step)) / step), float((f(a + step) - f(a)) / step)


def _autograd(fn, values):
    x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(fn(x).sum(), x)
    return grad


def test_the_where_leak_at_its_own_point_is_a_problem_with_its_branch_and_a_proven_rewrite():
    x = sympy.Symbol("x", real=True)
    sinc = sympy.Lambda(x, sympy.Piecewise((sympy.sin(x) / x, sympy.Ne(x, 0)), (1, True)))
    left, right = _sides(sinc)
    assert left == right
    truth = float(left)
    assert _mp_sides(lambda t: mpmath.sin(t) / t if t != 0 else mpmath.mpf(1)) == pytest.approx((truth, truth), abs=1e-15)
    auto = _autograd(lambda t: torch.where(t != 0, torch.sin(t) / t, 1.0), [-1.0, 0.0, 0.5, 1.0])
    assert math.isnan(auto[1].item())  # the bug, as torch really gives it

    result = gradcli.check("where(x != 0, sin(x)/x, 1)", {"x": "[-1.0, 0.0, 0.5, 1.0]"})
    assert not result.ok, str(result)
    comparison = result.variables[0]
    assert comparison.kinks == 0 and comparison.points == 4 and comparison.wrong == 1
    assert comparison.worst_at["x"] == 0.0 and comparison.worst_at["exact"] == truth
    assert any("branch boundary of d/dx where the derivative exists" in n for n in result.notes)
    (cause,) = [c for c in result.causes if c.is_bug]
    assert cause.kind == "leaked_branch" and "sin(x)/x" in cause.summary
    # The fix is proven by the check itself; here torch's autograd of it gives the truth at 0.
    assert cause.rewrite is not None and result.fix
    assert gradcli.check(result.fix, {"x": "[-1.0, 0.0, 0.5, 1.0]"}).ok
    safe = _autograd(lambda t: torch.where(t != 0, torch.sin(t) / torch.where(t != 0, t, 1.0), 1.0), [0.0])
    assert safe.item() == truth


def test_no_rewrite_is_proposed_when_the_constant_branch_cannot_carry_the_slope():
    # (exp(x)-1)/x -> 1 at 0 with slope 1/2: guarding the branch makes autograd finite (0 from
    # the constant), still not 1/2. The check must not call that a fix.
    x = sympy.Symbol("x", real=True)
    left, right = _sides(sympy.Lambda(x, sympy.Piecewise(((sympy.exp(x) - 1) / x, sympy.Ne(x, 0)), (1, True))))
    assert left == right == sympy.Rational(1, 2)
    guarded = _autograd(
        lambda t: torch.where(t != 0, (torch.exp(torch.where(t != 0, t, 0.0)) - 1) / torch.where(t != 0, t, 1.0), 1.0),
        [0.0])
    assert guarded.item() == 0.0 != float(left)
    result = gradcli.check("where(x != 0, (exp(x)-1)/x, 1)", {"x": "[-1.0, 0.0, 0.5]"})
    assert not result.ok
    assert result.variables[0].worst_at["exact"] == float(left)
    assert result.fix is None and not any(r.proven for r in result.rewrites)


def test_a_real_kink_or_a_jump_stays_a_kink():
    x = sympy.Symbol("x", real=True)
    left, right = _sides(sympy.Lambda(x, sympy.Max(x, 0)))
    assert left != right  # relu: 0 and 1
    left, right = _sides(sympy.Lambda(x, sympy.Piecewise((sympy.sin(x) / x, sympy.Ne(x, 0)), (2, True))))
    assert not (left.is_finite and right.is_finite)  # a jump: no derivative at all
    for text in ("relu(x)", "where(x != 0, sin(x)/x, 2)", "abs(x) + x**2"):
        result = gradcli.check(text, {"x": "[-1.0, 0.0, 0.5]"})
        assert result.ok, str(result)
        assert result.variables[0].kinks == 1 and result.variables[0].points == 2


def test_a_boundary_is_decided_along_the_variable_differentiated():
    # where(y > 0, x*y, 0) at y = 0: along x the branch never changes (d/dx = 0 both sides);
    # along y the sides differ when x != 0 (slope x on the right, 0 on the left).
    x, y = sympy.symbols("x y", real=True)
    f = sympy.Piecewise((x * y, y > 0), (0, True))
    along_x = _sides(sympy.Lambda(x, f.subs(y, 0)), 2)
    along_y = _sides(sympy.Lambda(y, f.subs(x, 2)))
    assert along_x[0] == along_x[1] == 0 and along_y[0] != along_y[1]
    result = gradcli.check("where(y > 0, x*y, 0)", {"x": "[2.0, 2.0]", "y": "[0.0, 1.0]"})
    assert result.ok, str(result)
    by_name = {c.name: c for c in result.variables}
    assert by_name["x"].kinks == 0 and by_name["x"].points == 2
    assert by_name["y"].kinks == 1
