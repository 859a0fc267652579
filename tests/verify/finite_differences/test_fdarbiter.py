"""Finite differences do not overrule the exact derivative (issue 18, section 1).

Each case here failed before: gradcheck's central differences (step 1e-6, float64) are
wrong at these points while autograd is right, as the 50-digit derivative (mpmath, computed
here without gradcli) shows. A gradient that is really wrong must still fail.
"""

from __future__ import annotations

import importlib
import math

import mpmath
import pytest
import torch

import gradcli
from gradcli.verify.finite_differences.arbiter import (
    CURVATURE, FLAT_FORWARD, LEAVES_DOMAIN, STEP_ROUNDED, arbitrate, elementwise_differences,
)
from gradcli.verify.finite_differences.gradchecks import run_gradcheck
from paths import FIXTURES

IDENTITY = FIXTURES / "identity_functions.py"


def _exact(derivative, x: float) -> float:
    with mpmath.workdps(50):
        return float(derivative(mpmath.mpf(x)))


@pytest.mark.parametrize(
    ("expression", "values", "derivative", "torch_f", "unreliable"),
    [
        ("x", "[1e20]", lambda x: 1, lambda x: x, 1),  # x +- 1e-6 rounds back to x
        ("1/x", "linspace(-1,1,201)", lambda x: -1 / x**2, lambda x: 1 / x, 1),  # the ~1e-17 point by the pole
        ("sqrt(x)", "[1e-300, 1e-20, 1.0]", lambda x: 1 / (2 * mpmath.sqrt(x)), torch.sqrt, 2),  # leaves the domain
        ("log(x)", "[1e-7, 1.0]", lambda x: 1 / x, torch.log, 1),  # the step x - 1e-6 < 0
        ("sin(x**2)", "[50000.0]", lambda x: 2 * x * mpmath.cos(x**2), lambda x: torch.sin(x**2), 1),  # oscillates
        ("x + 1e20", "[1.0, 2.0]", lambda x: 1, lambda x: x + 1e20, 2),  # the forward is constant in float64
    ],
)
def test_finite_differences_do_not_overrule_the_exact_derivative(expression, values, derivative, torch_f, unreliable):
    result = gradcli.check(expression, {"x": values})
    assert result.ok, str(result)
    assert result.gradcheck.ok is not False
    assert result.gradcheck.unreliable_points == unreliable
    assert any("finite differences are unreliable" in note for note in result.notes)
    # autograd itself, against mpmath's derivative at every point
    x = torch.tensor(eval(values) if values.startswith("[") else torch.linspace(-1, 1, 201).tolist(),
                     dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(torch_f(x).sum(), x)
    for xi, gi in zip(x.tolist(), grad.tolist()):
        truth = _exact(derivative, xi)
        assert gi == pytest.approx(truth, rel=1e-12, abs=1e-300)


def test_the_reasons_are_named():
    assert gradcli.check("x", {"x": "[1e20]"}).gradcheck.unreliable_reasons == {STEP_ROUNDED: 1}
    assert gradcli.check("x + 1e20", {"x": "[1.0]"}).gradcheck.unreliable_reasons == {FLAT_FORWARD: 1}
    assert gradcli.check("log(x)", {"x": "[1e-7]"}).gradcheck.unreliable_reasons == {LEAVES_DOMAIN: 1}


def test_the_points_left_are_still_gradchecked():
    result = gradcli.check("1/x", {"x": "linspace(-1,1,201)"})
    assert result.gradcheck.ok is True and result.gradcheck.points == 200


def test_a_gradient_only_finite_differences_catch_still_fails():
    # autograd is off by 2 at one point, the exact derivative is right: arbitration says wrong.
    x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    diffs = elementwise_differences(lambda v: torch.sin(v["x"]), {"x": x}, "x")
    auto = torch.cos(x)
    auto[1] += 2.0
    outcome = arbitrate(diffs, auto, lambda idx: [float(mpmath.cos(x[i].item())) for i in idx], atol=1e-10, rtol=1e-7)
    assert outcome.wrong_at == [1] and not outcome.explained


def test_check_function_with_a_reference_settles_finite_differences():
    result = gradcli.check_function(f"{IDENTITY}:Identity", ["x=[1e20, 1.0]"], ref="x")
    assert result.ok, str(result)
    assert result.gradcheck.unreliable_points == 1


@pytest.mark.parametrize("ref", [None, "x"])
def test_check_function_still_fails_a_wrong_backward(ref):
    result = gradcli.check_function(f"{IDENTITY}:IdentityScaled", ["x=[1e20, 1.0]"], ref=ref)
    assert not result.ok
    assert result.gradcheck.ok is False


def test_check_function_without_a_reference_says_why_finite_differences_failed():
    result = gradcli.check_function(f"{IDENTITY}:Identity", ["x=[1e20, 1.0]"])
    assert not result.ok  # no exact derivative to settle it: the failure stands
    assert any("give --ref" in note and STEP_ROUNDED in note for note in result.notes)


def test_a_failing_fast_mode_never_builds_a_dense_jacobian(monkeypatch):
    module = importlib.import_module("torch.autograd.gradcheck")
    calls = []
    original = module._get_numerical_jacobian
    monkeypatch.setattr(module, "_get_numerical_jacobian", lambda *a, **k: calls.append(1) or original(*a, **k))

    class Doubled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return 2 * g

    verdict = run_gradcheck(Doubled.apply, [torch.linspace(0, 1, 10_000, dtype=torch.float64)], seed=0)
    assert verdict.fast_mode and verdict.ok is False
    assert calls == []  # torch's slow-mode reprint (a 10,000 x 10,000 Jacobian) did not run


def test_second_order_settles_both_of_a_mirror_pair():
    """x*y at x = 1e20, y = 1: gradgradcheck fails on d(df/dy)/dx (the step in x is lost to
    rounding), not on d(df/dx)/dy; the settle must look at the pair both ways."""
    x = torch.tensor([1e20], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    # torch's own checker fails here, so there is a failure to settle
    assert not torch.autograd.gradgradcheck(lambda a, b: (a * b).sum(), (x, y), raise_exception=False)
    hessian = torch.autograd.functional.hessian(lambda a, b: (a * b).sum(), (x.detach(), y.detach()))
    truth = {"x,x": hessian[0][0].item(), "x,y": hessian[0][1].item(), "y,y": hessian[1][1].item()}
    assert truth == {"x,x": 0.0, "x,y": 1.0, "y,y": 0.0}
    assert hessian[1][0].item() == 1.0

    result = gradcli.check("x*y", {"x": "[1e20]", "y": "[1.0]"}, order=2)
    assert result.ok, str(result)
    assert result.gradgradcheck.ok is not False
    assert result.gradgradcheck.unreliable_reasons == {STEP_ROUNDED: 1}
    for comparison in result.second:
        assert comparison.ok
        assert comparison.worst_at["autograd"] == truth[comparison.name]


def test_a_coupled_check_settles_finite_differences_lost_to_a_large_element():
    """sum(x, dim=0) is checked in the exact (coupled) mode, through L = sum(w*y): with an
    element of 1e20 in it, no step of 1e-6 changes L in float64, so gradcheck fails everywhere
    while autograd's gradient, ones, is the exact one."""
    values = [[1e20, 1.0], [2.0, 3.0]]
    x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    assert not torch.autograd.gradcheck(lambda t: t.sum(dim=0), (x,), raise_exception=False)
    (grad,) = torch.autograd.grad(x.sum(dim=0), x, torch.tensor([1.0, 2.0], dtype=torch.float64))
    assert torch.equal(grad, torch.tensor([[1.0, 2.0], [1.0, 2.0]], dtype=torch.float64))  # d/dx of sum(w*y): w
    # why each element's central difference fails, from float64 itself
    flat, weights = [v for row in values for v in row], [1.0, 2.0]
    reasons: dict[str, int] = {}
    for i, v in enumerate(flat):
        if abs(((v + 1e-6) - (v - 1e-6)) - 2e-6) > 1e-3 * 2e-6:  # the step itself is lost
            reasons[STEP_ROUNDED] = reasons.get(STEP_ROUNDED, 0) + 1
            continue
        moved = [list(flat), list(flat)]
        moved[0][i] += 1e-6
        moved[1][i] -= 1e-6
        plus, minus = (sum(w * (m[c] + m[2 + c]) for c, w in enumerate(weights)) for m in moved)
        assert plus == minus  # the forward does not change over the step
        reasons[FLAT_FORWARD] = reasons.get(FLAT_FORWARD, 0) + 1

    result = gradcli.check("sum(x, dim=0)", {"x": str(values)})
    assert result.mode == "exact"
    assert result.ok, str(result)
    assert result.gradcheck.ok is True
    assert result.gradcheck.unreliable_points == len(flat)
    assert result.gradcheck.unreliable_reasons == reasons
    assert result.gradcheck.message == (  # the reasons by count, most first
        f"finite differences are unreliable at {len(flat)} points ({FLAT_FORWARD}: {reasons[FLAT_FORWARD]}; "
        f"{STEP_ROUNDED}: {reasons[STEP_ROUNDED]}), where autograd agrees with the 50-digit derivative")
    assert any("finite differences are unreliable" in note for note in result.notes)


def test_a_coupled_check_that_torch_passes_is_not_settled():
    """Without the large element torch's gradcheck passes: no point is set aside."""
    result = gradcli.check("sum(x, dim=0)", {"x": "[[1.0, 2.0], [3.0, 4.0]]"})
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: t.sum(dim=0), (x,), raise_exception=False)
    assert result.ok and result.gradcheck.ok is True and result.gradcheck.unreliable_points == 0


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_coupled_check_sets_aside_only_the_elements_whose_steps_leave_the_domain(dtype):
    """sum(sqrt(x), dim=0) with one element at 1e-7: its step x - 1e-6 leaves the domain, the
    three others' central differences are right. Counted here with torch, element by element,
    on L = sum(w*y) (gradcheck's test: |numerical - analytical| <= 1e-5 + 1e-3 |numerical|)."""
    values = [[1e-7, 1.0], [2.0, 3.0]]
    x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    assert not torch.autograd.gradcheck(lambda t: torch.sqrt(t).sum(dim=0), (x,), raise_exception=False)
    w = torch.tensor([1.0, 2.0], dtype=torch.float64)
    (auto,) = torch.autograd.grad((torch.sqrt(x).sum(dim=0) * w).sum(), x)
    reasons: dict[str, int] = {}
    for i in range(4):
        step = torch.zeros(4, dtype=torch.float64)
        step[i] = 1e-6
        plus, minus = ((torch.sqrt(x.detach() + s.reshape(2, 2)).sum(dim=0) * w).sum().item() for s in (step, -step))
        numerical, analytical = (plus - minus) / 2e-6, auto.reshape(-1)[i].item()
        if not (abs(numerical - analytical) <= 1e-5 + 1e-3 * abs(numerical)):
            assert not (math.isfinite(plus) and math.isfinite(minus))
            reasons[LEAVES_DOMAIN] = reasons.get(LEAVES_DOMAIN, 0) + 1
    assert reasons == {LEAVES_DOMAIN: 1}

    result = gradcli.check("sum(sqrt(x), dim=0)", {"x": str(values)}, dtype=dtype)
    assert result.mode == "exact"
    assert result.ok, str(result)
    assert result.gradcheck.ok is True
    assert result.gradcheck.unreliable_reasons == reasons
    assert result.gradcheck.unreliable_points == sum(reasons.values())
    assert result.gradcheck.message == (f"finite differences are unreliable at 1 point ({LEAVES_DOMAIN}: 1), "
                                        "where autograd agrees with the 50-digit derivative")


def test_a_mean_is_settled_per_point_with_its_own_scale():
    """mean(sin(x**2)): each point's derivative is divided by the number of points, and so are
    its central differences; only the point at 5e4 (a fast oscillation) disagrees, counted here
    with torch by gradcheck's test on the mean's own values."""
    values = [0.5, 1.0, 2.0, 50000.0]
    x = torch.tensor(values, dtype=torch.float64)
    numerical = (torch.sin((x + 1e-6) ** 2) - torch.sin((x - 1e-6) ** 2)) / 2e-6 / len(values)
    leaf = x.clone().requires_grad_(True)
    (analytical,) = torch.autograd.grad(torch.sin(leaf**2).mean(), leaf)
    disagreeing = int((~((analytical - numerical).abs() <= 1e-5 + 1e-3 * numerical.abs())).sum())
    assert disagreeing == 1
    for v, a in zip(values, analytical.tolist()):  # autograd is the exact derivative (mpmath)
        assert a == pytest.approx(_exact(lambda t: 2 * t * mpmath.cos(t**2), v) / len(values), rel=1e-9, abs=1e-12)

    result = gradcli.check("mean(sin(x**2))", {"x": str(values)})
    assert result.ok, str(result)
    assert result.gradcheck.unreliable_points == disagreeing
    assert result.gradcheck.unreliable_reasons == {CURVATURE: disagreeing}


def test_second_order_counts_a_diagonal_point_once():
    """x**3 at 1e20: the step of d(3x**2)/dx is lost to rounding at one point, counted once;
    at 2.0 torch's gradgradcheck passes, and autograd's second derivative is 6x (mpmath)."""
    x = torch.tensor([1e20, 2.0], dtype=torch.float64, requires_grad=True)
    assert not torch.autograd.gradgradcheck(lambda t: t**3, (x,), raise_exception=False)
    assert torch.autograd.gradgradcheck(lambda t: t**3, (x[1:].detach().clone().requires_grad_(True),),
                                        raise_exception=False)
    (first,) = torch.autograd.grad((x**3).sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), x)
    for v, s in zip(x.tolist(), second.tolist()):
        assert s == pytest.approx(_exact(lambda t: 6 * t, v), rel=1e-12)
    result = gradcli.check("x**3", {"x": "[1e20, 2.0]"}, order=2)
    assert result.ok, str(result)
    assert result.gradgradcheck.ok is True and result.gradgradcheck.points == 1
    assert result.gradgradcheck.unreliable_points == 1
    assert result.gradgradcheck.unreliable_reasons == {STEP_ROUNDED: 1}
    sentence = (f"finite differences of the first derivative are unreliable at 1 point ({STEP_ROUNDED}: 1), "
                "where autograd agrees with the 50-digit derivative")
    assert result.gradgradcheck.message == sentence
    assert f"gradgradcheck: {sentence}; those points are left out of it" in result.notes


CUBE = """
[cube]
signature = "cube(x)"
body = "x * x * x"
doc = "x cubed, from a --library folder of the user's."
source = "this test"
link = "https://example.org"
domain = [-1e30, 1e30]
derivative = "3 * x * x"
"""


def test_a_library_function_is_settled_with_its_own_body(tmp_path):
    """A function from the user's --library folder: the settle evaluates it (first and second
    order) with that library, where torch's checkers fail at 1e20 and pass at 2.0."""
    (tmp_path / "mine.toml").write_text(CUBE)
    x = torch.tensor([1e20, 2.0], dtype=torch.float64, requires_grad=True)
    assert not torch.autograd.gradcheck(lambda t: t * t * t, (x,), raise_exception=False)
    assert not torch.autograd.gradgradcheck(lambda t: t * t * t, (x,), raise_exception=False)
    rest = (x[1:].detach().clone().requires_grad_(True),)
    assert torch.autograd.gradgradcheck(lambda t: t * t * t, rest, raise_exception=False)
    (first,) = torch.autograd.grad((x * x * x).sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), x)
    for v, d, s in zip(x.tolist(), first.tolist(), second.tolist()):
        assert d == pytest.approx(_exact(lambda t: 3 * t * t, v), rel=1e-12)
        assert s == pytest.approx(_exact(lambda t: 6 * t, v), rel=1e-12)
    result = gradcli.check("cube(x)", {"x": "[1e20, 2.0]"}, order=2, library_dirs=[tmp_path])
    assert result.ok, str(result)
    for verdict in (result.gradcheck, result.gradgradcheck):
        assert verdict.ok is True and verdict.points == 1 and verdict.unreliable_reasons == {STEP_ROUNDED: 1}


def _versine(x: torch.Tensor) -> torch.Tensor:
    return (1 - torch.cos(x)) / x**2


@pytest.mark.parametrize(("values", "wrong"), [([1e-5], 1), ([1e-5, 2e-5], 2), ([1e-5, 1.0], 1)])
def test_where_autograd_is_wrong_too_finite_differences_are_not_blamed(values, wrong):
    """(1 - cos x)/x² near 0: autograd's sin(x)/x² - 2(1 - cos x)/x³ cancels to rounding noise
    there, and so do the central differences; mpmath's 50-digit derivative shows autograd
    wrong, so no point is set aside as finite differences' fault and gradcheck's failure stands.
    The points are counted here with torch (gradcheck's test) and mpmath."""
    x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(_versine(x).sum(), x)
    with torch.no_grad():
        numerical = (_versine(x + 1e-6) - _versine(x - 1e-6)) / 2e-6
    exact = [_exact(lambda t: mpmath.sin(t) / t**2 - 2 * (1 - mpmath.cos(t)) / t**3, v) for v in values]
    disagree = ~((auto - numerical).abs() <= 1e-5 + 1e-3 * numerical.abs())
    off = [abs(a - e) > 1e-3 for a, e in zip(auto.tolist(), exact)]  # autograd against the exact value
    counted = sum(bool(d) and o for d, o in zip(disagree.tolist(), off))
    assert counted == wrong, "the premise"
    assert not torch.autograd.gradcheck(_versine, (x,), raise_exception=False)

    result = gradcli.check("(1 - cos(x)) / x**2", {"x": str(values)})
    assert not result.ok and result.gradcheck.ok is False
    assert result.gradcheck.unreliable_points == 0 and result.gradcheck.unreliable_reasons == {}
    assert result.gradcheck.message == "Jacobian mismatch for output 0 with respect to input 0"
    assert result.notes == [f"gradcheck: finite differences and the 50-digit derivative both disagree with autograd at "
                            f"{wrong} point{'s' if wrong != 1 else ''}"]


def test_a_coupled_check_whose_forward_overflows_is_not_gradchecked_nor_settled():
    """sum(x**2, dim=0) with an element of 1e200: torch's forward overflows to inf while its
    gradient 2x is finite. gradcheck is not run on a function that is not finite there, and
    a check not run is not turned into a pass by setting points aside."""
    x = torch.tensor([[1e200, 1.0], [2.0, 3.0]], dtype=torch.float64, requires_grad=True)
    out = (x**2).sum(dim=0)
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert not bool(torch.isfinite(out).all()) and bool(torch.isfinite(grad).all()), "the premise"
    result = gradcli.check("sum(x**2, dim=0)", {"x": "[[1e200, 1.0], [2.0, 3.0]]"})
    assert result.mode == "exact"
    assert result.gradcheck.ok is None and result.gradcheck.message == "the function is not finite at the points left"
    assert result.gradcheck.unreliable_points == 0 and result.gradcheck.unreliable_reasons == {}
    assert not any("finite differences are unreliable" in note for note in result.notes)


def test_both_variables_at_1e20_count_one_point_and_a_reason_each():
    """x*y at x = y = 1e20: the step is lost in x and in y alike, so gradcheck's central
    differences disagree with autograd (y and x, 1e20 each: exact) in both variables at the
    one point, counted here with torch. One point is left out, and told as one: the reason
    counts points, not the derivatives that failed at them."""
    x = torch.tensor([1e20], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1e20], dtype=torch.float64, requires_grad=True)
    gx, gy = torch.autograd.grad((x * y).sum(), (x, y))
    with torch.no_grad():
        nx = ((x + 1e-6) * y - (x - 1e-6) * y) / 2e-6
        ny = (x * (y + 1e-6) - x * (y - 1e-6)) / 2e-6
    pairs = sum(int((~((a - n).abs() <= 1e-5 + 1e-3 * n.abs())).sum()) for a, n in ((gx, nx), (gy, ny)))
    assert pairs == 2 and float(gx) == 1e20 == float(gy), "the premise"
    assert float(x.detach() + 1e-6) == float(x.detach() - 1e-6)
    result = gradcli.check("x*y", {"x": "[1e20]", "y": "[1e20]"})
    assert result.ok, str(result)
    assert result.gradcheck.unreliable_points == 1
    assert result.gradcheck.unreliable_reasons == {STEP_ROUNDED: 1}
    # torch's slow mode ran on the one point (docs/json.md: fast mode is for large inputs); none is left
    assert (result.gradcheck.ok, result.gradcheck.fast_mode, result.gradcheck.points) == (None, False, 0)
    assert result.gradcheck.message == (f"no point left: finite differences are unreliable at 1 point ({STEP_ROUNDED}: 1), "
                                        "where autograd agrees with the 50-digit derivative")


def test_a_mean_at_second_order_scales_its_differences_as_its_derivatives():
    """mean(x*y) at order 2: the mixed second derivative is 1/2 at both points (torch); the
    central differences of the first derivative are exact at (1, 2) and lost to rounding only
    where x = 1e20 (counted with torch), so one point is set aside, not two."""
    x = torch.tensor([1e20, 1.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    (gy,) = torch.autograd.grad((x * y).mean(), y, create_graph=True)
    (hyx,) = torch.autograd.grad(gy.sum(), x)
    assert hyx.tolist() == [0.5, 0.5], "the premise: torch's mixed second derivative"
    with torch.no_grad():
        moved = ((x + 1e-6) - (x - 1e-6)) / 2 / 2e-6  # d(gy)/dx by central differences: gy = x/2
    lost = int((~((hyx - moved).abs() <= 1e-5 + 1e-3 * moved.abs())).sum())
    assert lost == 1
    result = gradcli.check("mean(x*y)", {"x": "[1e20, 1.0]", "y": "[1.0, 2.0]"}, order=2)
    assert result.ok, str(result)
    assert result.gradgradcheck.ok is True and result.gradgradcheck.unreliable_points == lost
    assert result.gradgradcheck.unreliable_reasons == {STEP_ROUNDED: lost}


def _gradcheck(f, x: torch.Tensor, fast: bool) -> bool:
    return torch.autograd.gradcheck(f, (x.clone().requires_grad_(True),), fast_mode=fast, raise_exception=False)


def test_a_first_order_fast_mode_failure_that_is_its_projection_s_alone_passes():
    """x**2 at 301 points from 5e6 to 1e7 (past 300 input elements: fast mode): torch's gradcheck
    fails in fast mode (its one random projection, from a generator of its own) and passes in
    slow mode, every element's central difference; autograd's 2x is the derivative to the last
    bit (doubling is exact in float64). The failure is the projection's, and said so."""
    x = torch.linspace(5e6, 1e7, 301, dtype=torch.float64)
    assert _gradcheck(torch.square, x, fast=True) is False
    assert _gradcheck(torch.square, x, fast=False) is True
    leaf = x.clone().requires_grad_(True)
    assert torch.equal(torch.autograd.grad((leaf**2).sum(), leaf)[0], 2 * x)

    result = gradcli.check("x**2", {"x": "linspace(5e6, 1e7, 301)"})
    assert torch.equal(result.points["x"], x)
    assert result.ok, str(result)
    verdict = result.gradcheck
    assert (verdict.ok, verdict.fast_mode, verdict.points, verdict.unreliable_points) == (True, True, 301, 0)
    assert verdict.message.startswith("fast mode's random projection failed (Jacobian mismatch")
    assert "element by element agree with autograd at every one of the 301 points" in verdict.message
    assert result.notes == [f"gradcheck: {verdict.message}"]


def _torch_verdict(x: torch.Tensor, fast: bool):
    """torch's gradcheck of x**2 at `x`, in fast or slow mode, as a verdict: its first line when it fails."""
    from torch.autograd.gradcheck import GradcheckError

    from gradcli.verify.finite_differences.gradchecks import GradcheckVerdict

    try:
        torch.autograd.gradcheck(torch.square, (x.clone().requires_grad_(True),), fast_mode=fast)
    except GradcheckError as err:
        return GradcheckVerdict(False, fast, str(err).strip().splitlines()[0].rstrip(","), x.numel())
    return GradcheckVerdict(True, fast, None, x.numel())


def test_only_a_fast_mode_failure_with_every_derivative_compared_is_the_projection_s():
    """`_projection_alone` on torch's own verdicts: x**2 at 301 points from 5e6 to 1e7 fails in
    fast mode, from 1e7 to 2e7 in slow mode (every element's central difference, never a
    projection). The evidence is the check's comparisons with the exact derivatives: a first
    order check has compared no second derivative, so gradgradcheck's failure is not settled
    by it; a second-order check has."""
    from gradcli.verify.finite_differences.settle import _projection_alone

    x = torch.linspace(5e6, 1e7, 301, dtype=torch.float64)
    fast, slow = _torch_verdict(x, fast=True), _torch_verdict(torch.linspace(1e7, 2e7, 301, dtype=torch.float64), fast=False)
    assert (fast.ok, fast.fast_mode, slow.ok, slow.fast_mode) == (False, True, False, False)
    assert fast.message.startswith("Jacobian mismatch") and slow.message.startswith("Jacobian mismatch")
    # central differences at every point agree with autograd (as torch's slow mode does there, above)
    outcomes = [arbitrate(elementwise_differences(lambda v: v["x"] ** 2, {"x": x}, "x"), 2 * x,
                          lambda positions: [2 * float(x[p]) for p in positions], atol=1e-5, rtol=1e-3)]
    assert outcomes[0].disagreeing == 0

    first = gradcli.check("x**2", {"x": "linspace(5e6, 1e7, 301)"})
    second = gradcli.check("x**2", {"x": "linspace(5e6, 1e7, 301)"}, order=2)
    assert not first.second and second.second
    assert _projection_alone(first, "gradcheck", fast, outcomes) is True
    assert _projection_alone(first, "gradcheck", slow, outcomes) is False
    assert _projection_alone(first, "gradgradcheck", fast, outcomes) is False
    assert _projection_alone(second, "gradgradcheck", fast, outcomes) is True


def test_a_fast_mode_failure_is_not_the_projection_s_where_a_derivative_was_never_compared():
    """x**2 + 1e39*y in float32: d/dy = 1e39 is past float32's largest value, so torch's float32
    autograd gives inf there and no point of y is compared with the exact derivative (none can
    be). torch's float64 gradcheck fails in fast mode at the check's points; central differences
    element by element agree, yet "autograd agrees with the exact derivatives there" would be
    said of a derivative never compared: torch's verdict stands."""
    var = {"x": "linspace(5e6, 1e7, 301)", "y": "linspace(1e-30, 2e-30, 301)"}
    result = gradcli.check("x**2 + 1e39*y", var, dtype="float32")
    x, y = result.points["x"], result.points["y"]
    assert 1e39 > torch.finfo(torch.float32).max
    leaf = y.float().requires_grad_(True)
    assert torch.isinf(torch.autograd.grad((x.float() ** 2 + 1e39 * leaf).sum(), leaf)[0]).all()
    leaves = (x.clone().requires_grad_(True), y.clone().requires_grad_(True))
    assert torch.autograd.gradcheck(lambda a, b: a**2 + 1e39 * b, leaves, fast_mode=True, raise_exception=False) is False

    assert [(c.name, c.points, c.ok) for c in result.variables] == [("x", 301, True), ("y", 0, True)]
    verdict = result.gradcheck
    assert (verdict.ok, verdict.fast_mode, verdict.unreliable_points) == (False, True, 0)
    assert verdict.message.startswith("Jacobian mismatch") and not result.notes
    assert not result.ok


def test_a_coupled_check_counts_each_variable_s_element_on_its_own():
    """sum(sqrt(x) + sqrt(y), dim=0), both with an element at 1e-7 in the same place: in the
    exact mode each variable's elements are the points, so the two steps that leave the domain
    are two points, not one position. Counted here with torch, element by element of each
    variable, on L = sum(w*y) (gradcheck's test), as the one-variable test above does."""
    values = [[1e-7, 1.0], [2.0, 3.0]]
    x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    y = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    w = torch.tensor([1.0, 2.0], dtype=torch.float64)

    def f(a, b):
        return torch.sqrt(a).sum(dim=0) + torch.sqrt(b).sum(dim=0)

    assert not torch.autograd.gradcheck(f, (x, y), raise_exception=False)
    autos = torch.autograd.grad((f(x, y) * w).sum(), (x, y))
    failing = 0
    for k, auto in enumerate(autos):
        for i in range(4):
            step = torch.zeros(4, dtype=torch.float64)
            step[i] = 1e-6
            moved = [[t.detach() + (s.reshape(2, 2) if j == k else 0) for j, t in enumerate((x, y))] for s in (step, -step)]
            plus, minus = ((f(*m) * w).sum().item() for m in moved)
            numerical = (plus - minus) / 2e-6
            failing += not (abs(numerical - auto.reshape(-1)[i].item()) <= 1e-5 + 1e-3 * abs(numerical))
    assert failing == 2

    result = gradcli.check("sum(sqrt(x) + sqrt(y), dim=0)", {"x": str(values), "y": str(values)})
    assert result.mode == "exact" and result.ok, str(result)
    assert (result.gradcheck.ok, result.gradcheck.unreliable_points) == (True, failing)
    assert (result.gradcheck.fast_mode, result.gradcheck.points) == (False, x.numel() + y.numel())  # torch's slow mode
    assert result.gradcheck.unreliable_reasons == {LEAVES_DOMAIN: failing}


def test_points_set_aside_then_a_projection_failure_on_the_rest_are_both_told():
    """x**2 at the 301 points above and at 1e20, 2e20, 3e20, where x ± 1e-6 rounds back to x
    (torch's float64): those three are finite differences' fault (autograd's 2x is exact), and
    gradcheck on the 301 left fails again in fast mode, passing in slow mode: its projection."""
    x = torch.linspace(5e6, 1e7, 301, dtype=torch.float64)
    big = torch.tensor([1e20, 2e20, 3e20], dtype=torch.float64)
    assert torch.equal(big + 1e-6, big - 1e-6)
    every = torch.cat([x, big])
    assert _gradcheck(torch.square, every, fast=True) is False
    assert _gradcheck(torch.square, x, fast=True) is False and _gradcheck(torch.square, x, fast=False) is True

    result = gradcli.check("x**2", {"x": "[" + ", ".join(repr(v) for v in every.tolist()) + "]"})
    assert torch.equal(result.points["x"], every)
    assert result.ok, str(result)
    verdict = result.gradcheck
    assert (verdict.ok, verdict.fast_mode, verdict.points, verdict.unreliable_points) == (True, True, 301, 3)
    assert verdict.unreliable_reasons == {STEP_ROUNDED: 3}
    unreliable = (f"finite differences are unreliable at 3 points ({STEP_ROUNDED}: 3), where autograd agrees "
                  "with the 50-digit derivative")
    projection = ("fast mode's random projection failed (Jacobian mismatch for output 0 with respect to input 0), "
                  "yet central differences element by element agree with autograd at every one of the 301 points, "
                  "and autograd agrees with the exact derivatives there: the projection's rounding, not the gradient")
    assert verdict.message == f"{unreliable}; {projection}"
    assert result.notes == [f"gradcheck: {unreliable}; those points are left out of it", f"gradcheck: {projection}"]


def test_a_failure_on_the_points_left_keeps_torch_s_message_besides_the_points_set_aside():
    """x**2 + 1e39*y in float32 (y never compared: d/dy is past float32's range) at 320 points
    from 1e7 to 2e7: torch's central differences (gradcheck's test, float64) fail at some points
    where x's step is lost to rounding; on the points left torch's gradcheck fails in fast mode.
    That failure is not settled (a derivative was never compared), so it keeps torch's message,
    and the points set aside are told besides."""
    var = {"x": "linspace(1e7, 2e7, 320)", "y": "linspace(1e-30, 2e-30, 320)"}
    result = gradcli.check("x**2 + 1e39*y", var, dtype="float32")
    x, y = result.points["x"], result.points["y"]

    def f(a, b):
        return a**2 + 1e39 * b

    bad = torch.zeros(x.numel(), dtype=torch.bool)
    for k, exact in enumerate((2 * x, torch.full_like(y, 1e39))):  # autograd's, exact in float64 here
        plus, minus = (f(*[t + step if j == k else t for j, t in enumerate((x, y))]) for step in (1e-6, -1e-6))
        numerical = (plus - minus) / 2e-6
        bad |= ~((exact - numerical).abs() <= 1e-5 + 1e-3 * numerical.abs())
    left = (x[~bad].clone().requires_grad_(True), y[~bad].clone().requires_grad_(True))
    assert 0 < int(bad.sum()) and torch.autograd.gradcheck(f, left, fast_mode=True, raise_exception=False) is False

    verdict = result.gradcheck
    assert (verdict.ok, verdict.fast_mode, verdict.unreliable_points) == (False, True, int(bad.sum()))
    assert verdict.message == (f"Jacobian mismatch for output 0 with respect to input 0; besides, finite differences are "
                               f"unreliable at {int(bad.sum())} points ({STEP_ROUNDED}: {int(bad.sum())}), where autograd "
                               "agrees with the 50-digit derivative")
