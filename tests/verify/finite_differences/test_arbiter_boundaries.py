"""The finite-difference arbiter (verify/finite_differences/arbiter.py) at its boundaries.

- `disagreeing` is gradcheck's own test per element; gradcheck compares with
  `torch.allclose(analytical, numerical, rtol, atol)`, so torch.isclose is the truth, including
  at |a - n| exactly on the tolerance, infinities and nan.
- `arbitrate` keeps finite differences' blame only where autograd is within the check's
  tolerance of the exact value (torch.isclose again, with the check's atol and rtol); a nan
  autograd value or an exact value that is not finite never counts as explained.
- `reason`'s tests read what went into the differences: the step lost to rounding (more than a
  thousandth of 2·EPS, measured with torch's float64 arithmetic), a non-finite side, a flat
  forward only when the derivative is not 0, and the forward's rounding against the tolerance.
"""

from __future__ import annotations

import math

import torch

from gradcli.exact.arbitrate import UNDEFINED
from gradcli.verify.finite_differences.arbiter import (
    ATOL, CURVATURE, EPS, FLAT_FORWARD, FORWARD_ROUNDING, LEAVES_DOMAIN, RTOL, STEP_ROUNDED, Differences,
    arbitrate, disagreeing, elementwise_differences, reason,
)

F64 = torch.float64


def _around(center: float, steps: int = 3) -> list[float]:
    """center and `steps` floats either side of it."""
    out, up, down = [center], center, center
    for _ in range(steps):
        up, down = math.nextafter(up, math.inf), math.nextafter(down, -math.inf)
        out += [up, down]
    return out


def test_disagreeing_is_gradcheck_s_allclose_element_by_element_at_the_tolerance():
    numerical, analytical = [], []
    for n in (0.0, 1.0, -3.0, 1e3, 1e-8):
        for a in _around(n + (ATOL + RTOL * abs(n))) + _around(n - (ATOL + RTOL * abs(n))):
            numerical.append(n)
            analytical.append(a)
    inf, nan = math.inf, math.nan
    numerical += [inf, inf, -inf, nan, nan, 1.0, inf]
    analytical += [inf, 1e300, -inf, nan, 1.0, inf, -inf]
    n, a = torch.tensor(numerical, dtype=F64), torch.tensor(analytical, dtype=F64)
    truth = ~torch.isclose(a, n, rtol=RTOL, atol=ATOL)
    assert truth.any() and (~truth).any()
    assert truth[:2].tolist() == [False, True]  # ATOL away from 0 is close, one float further is not
    assert torch.equal(disagreeing(n, a), truth)
    # and gradcheck's own verdict over each pair agrees with allclose's
    assert torch.allclose(a[:1], n[:1], rtol=RTOL, atol=ATOL) is not bool(disagreeing(n[:1], a[:1]))


def _identity_at_1e20(count: int) -> Differences:
    """x at 1e20: x ± 1e-6 rounds back to x in float64, so finite differences say 0 where the
    derivative (torch's autograd, and the exact one) is 1."""
    x = torch.full((count,), 1e20, dtype=F64)
    diffs = elementwise_differences(lambda v: v["x"], {"x": x}, "x")
    leaf = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(leaf.sum(), leaf)
    assert torch.equal(diffs.value, torch.zeros(count, dtype=F64)) and torch.equal(grad, torch.ones(count, dtype=F64))
    return diffs


def test_arbitrate_blames_finite_differences_exactly_where_autograd_is_within_the_check_s_tolerance():
    atol, rtol = 1e-5, 1e-3
    autograd = torch.tensor(_around(1.0 + (atol + rtol)) + _around(1.0 - (atol + rtol)) + [1.0], dtype=F64)
    diffs = _identity_at_1e20(autograd.numel())
    result = arbitrate(diffs, autograd, lambda positions: [1.0] * len(positions), atol=atol, rtol=rtol)
    within = torch.isclose(autograd, torch.ones_like(autograd), rtol=rtol, atol=atol)
    assert within.any() and (~within).any()
    assert result.disagreeing == autograd.numel()
    assert sorted(result.unreliable) == within.nonzero().flatten().tolist()
    assert sorted(result.wrong_at) == (~within).nonzero().flatten().tolist()
    assert set(result.unreliable.values()) == {STEP_ROUNDED}
    assert result.undecided == 0 and not result.explained
    # exactly on the tolerance: 1 + 2**-10 is 2**-10 from 1 to the last bit
    tol = 2.0**-10
    autograd = torch.tensor([1.0 + tol, math.nextafter(1.0 + tol, 2.0), 1.0 - tol, math.nextafter(1.0 - tol, 0.0)], dtype=F64)
    result = arbitrate(_identity_at_1e20(4), autograd, lambda positions: [1.0] * len(positions), atol=tol, rtol=0.0)
    within = torch.isclose(autograd, torch.ones_like(autograd), rtol=0.0, atol=tol)
    assert within.tolist() == [True, False, True, False]
    assert sorted(result.unreliable) == [0, 2] and result.wrong_at == [1, 3]


def test_explained_only_when_every_disagreement_is_finite_differences_fault():
    diffs = _identity_at_1e20(3)
    exact = lambda positions: [1.0] * len(positions)  # noqa: E731  (d/dx x)
    right = arbitrate(diffs, torch.ones(3, dtype=F64), exact, atol=1e-5, rtol=1e-3)
    assert right.explained and len(right.unreliable) == 3
    nan_one = arbitrate(diffs, torch.tensor([1.0, math.nan, 1.0], dtype=F64), exact, atol=1e-5, rtol=1e-3)
    assert nan_one.wrong_at == [1] and not nan_one.explained
    undefined = arbitrate(diffs, torch.ones(3, dtype=F64), lambda positions: [1.0, UNDEFINED, math.inf][: len(positions)],
                          atol=1e-5, rtol=1e-3)
    assert undefined.undecided == 2 and len(undefined.unreliable) == 1 and not undefined.explained
    # where finite differences agree with autograd there is nothing to explain
    x = torch.tensor([0.5, 2.0], dtype=F64)
    agreeing = elementwise_differences(lambda v: v["x"] ** 2, {"x": x}, "x")
    none = arbitrate(agreeing, 2 * x, exact, atol=1e-5, rtol=1e-3)
    assert none.disagreeing == 0 and not none.explained
    only = arbitrate(diffs, torch.ones(3, dtype=F64), exact, atol=1e-5, rtol=1e-3, positions=torch.tensor([2]))
    assert only.disagreeing == 1 and list(only.unreliable) == [2]


def _lost(x: float) -> float:
    """How far torch's float64 (x + EPS) - (x - EPS) is from 2·EPS."""
    t = torch.tensor(x, dtype=F64)
    return abs((((t + EPS) - (t - EPS)) - 2 * EPS).item())


def test_the_step_is_lost_to_rounding_past_a_thousandth_of_itself():
    """Scan the magnitudes where float64's spacing nears 2e-9 (x ~ 1e7) for points on both
    sides of a thousandth of the step, and ask the reason at each."""
    limit = 1e-3 * 2 * EPS
    xs = [m * 2.0**k for k in range(16, 28) for m in (1.0, 1.1, 1.3, 1.7)]
    over = [x for x in xs if _lost(x) > limit]
    under = [x for x in xs if 0 < _lost(x) <= limit]
    assert over and under
    for x in over + under:
        t = torch.tensor([x], dtype=F64)
        diffs = Differences(t, t + 1.0, t - 1.0, torch.zeros(1, dtype=F64))  # finite, not flat
        assert (reason(diffs, 0, 1.0) == STEP_ROUNDED) is (x in over), x


def test_a_side_that_is_not_finite_leaves_the_domain():
    x = torch.tensor([0.0, 1e-7, 1.0], dtype=F64)
    diffs = elementwise_differences(lambda v: torch.sqrt(v["x"]), {"x": x}, "x")
    finite = torch.isfinite(diffs.plus) & torch.isfinite(diffs.minus)
    assert finite.tolist() == [False, False, True]  # sqrt(-1e-6) is nan
    exact = [0.5 / math.sqrt(v) if v > 0 else math.inf for v in x.tolist()]
    assert [reason(diffs, i, exact[i]) == LEAVES_DOMAIN for i in range(3)] == (~finite).tolist()


def test_a_flat_forward_is_blamed_only_for_a_derivative_that_is_not_zero():
    x = torch.tensor([1.0], dtype=F64)
    diffs = elementwise_differences(lambda v: v["x"] + 1e20, {"x": x}, "x")
    assert diffs.plus.item() == diffs.minus.item()  # torch: x ± 1e-6 + 1e20 is 1e20 either way
    leaf = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad((leaf + 1e20).sum(), leaf)
    assert reason(diffs, 0, grad.item()) == FLAT_FORWARD
    assert reason(diffs, 0, 0.0) != FLAT_FORWARD


def test_the_forward_s_rounding_is_blamed_past_a_tenth_of_the_tolerance():
    """f(x) = x + C at x = 1: the forward's spacing (torch's nextafter) over 2·EPS against a
    tenth of the tolerance at the exact derivative; the exact values here straddle it."""
    for c in (2.0**20, 2.0**21):
        x = torch.tensor([1.0], dtype=F64)
        diffs = elementwise_differences(lambda v, c=c: v["x"] + c, {"x": x}, "x")
        top = torch.maximum(diffs.plus.abs(), diffs.minus.abs())
        spacing = (torch.nextafter(top, torch.tensor(math.inf, dtype=F64)) - top).item()
        edge = (spacing / (2 * EPS) / 0.1 - ATOL) / RTOL  # the |exact| where the two are equal
        for exact in (edge * (1 - 1e-9), edge * (1 + 1e-9), -edge * (1 - 1e-9), -edge * (1 + 1e-9)):
            rounding = spacing / (2 * EPS) > 0.1 * (ATOL + RTOL * abs(exact))
            assert rounding is (abs(exact) < edge)  # the derivative's size, whatever its sign
            assert reason(diffs, 0, exact) == (FORWARD_ROUNDING if rounding else CURVATURE)
