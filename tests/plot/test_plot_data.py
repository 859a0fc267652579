"""plot/data.py: the curves and shaded ranges, against torch, sympy and hand-derived values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gradcli.errors import GradcliError, UsageError
from gradcli.plot.data import plot_data
from gradcli.plot.scale import value_range
from gradcli.plot.shades import describe_values, runs, shades


def test_softplus_overflow_is_shaded_where_autograd_gives_nan():
    data = plot_data("log(1+exp(x))", ["x=linspace(-800, 800, 2001)"])
    x = torch.linspace(-800, 800, 2001, dtype=torch.float64)
    assert np.array_equal(data.x, x.numpy())
    unstable = [s for s in data.shades if s.kind == "unstable"]
    assert len(unstable) == 1
    shade = unstable[0]
    # exp overflows past log(max float64) = 709.78; the grid step is 0.8, so 710.4 is the first bad x.
    assert shade.first == pytest.approx(710.4) and shade.last == 800.0
    assert shade.points == 113 and shade.got == "nan" and shade.exact == "1"
    assert shade.start == pytest.approx(710.0) and shade.stop == pytest.approx(800.4)
    (curve,) = data.curves
    assert curve.comparison.wrong == 113 and not data.ok
    # The exact curve holds the 50-digit value (1) where the float64 formula is nan too.
    assert np.all(curve.exact[x.numpy() > 710] == 1.0)
    expected = torch.sigmoid(x).numpy()
    assert np.allclose(curve.exact, expected, rtol=1e-12, atol=1e-300)
    # f itself overflows to inf there: shaded as "not finite".
    assert [(s.kind, s.order, s.points) for s in data.shades if s.kind == "nonfinite"] == [("nonfinite", 0, 113)]


def test_agreement_gives_no_shades_and_matches_torch():
    data = plot_data("x*sigmoid(x)", ["x=linspace(-4, 4, 81)"], order=2)
    assert data.ok and data.shades == [] and data.kinks == []
    x = torch.linspace(-4, 4, 81, dtype=torch.float64, requires_grad=True)
    y = x * torch.sigmoid(x)
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    first, second = data.curves
    assert np.allclose(data.f, y.detach().numpy(), rtol=1e-14)
    assert np.allclose(first.autograd, g.detach().numpy(), rtol=1e-14)
    assert np.allclose(second.autograd, h.numpy(), rtol=1e-14)
    s = torch.sigmoid(x.detach())
    exact2 = (s * (1 - s) * (2 + x.detach() * (1 - 2 * s))).numpy()  # (x sigma)'' by hand
    assert np.allclose(second.exact, exact2, rtol=1e-12, atol=1e-15)
    assert np.all(first.difference <= first.tolerance)


def test_domain_and_kink_from_the_verify_regions():
    data = plot_data("relu(x) + sqrt(x)", ["x=linspace(-2, 2, 5)"])
    # sqrt is undefined for x < 0; at x = 0 it is defined (0, decided exactly by
    # verify.domain) but its slope is not (infinite).
    kinds = sorted((s.kind, s.order, s.first, s.last) for s in data.shades)
    assert kinds == [("undefined", 0, -2.0, -1.0), ("undefined", 1, 0.0, 0.0)]
    (curve,) = data.curves
    assert math.isnan(curve.exact[2])
    assert curve.exact[3] == pytest.approx(1 + 0.5)  # relu' + 1/(2 sqrt(1))
    assert data.ok


def test_kinks_are_listed():
    data = plot_data("abs(x)", ["x=linspace(-1, 1, 5)"])
    assert data.kinks == [0.0]


def test_other_variables_are_held_fixed():
    data = plot_data("x*y + y", ["y=2"])
    assert data.variable == "x" and data.fixed == {"y": 2.0}
    assert np.all(data.curves[0].autograd == 2.0)
    assert data.axis_source == "x=linspace(-5, 5, 1001) (default)"


def test_library_call_defaults_to_its_domain():
    data = plot_data("swish(x, beta=2)")
    assert data.x[0] == -8.0 and data.x[-1] == 8.0 and data.x.size == 1001


def test_a_final_sum_plots_its_body():
    data = plot_data("(x*x).sum()", ["x=[3.0, 1.0, 2.0]"])
    assert list(data.x) == [1.0, 2.0, 3.0]  # sorted
    assert list(data.f) == [1.0, 4.0, 9.0]
    assert list(data.curves[0].autograd) == [2.0, 4.0, 6.0]


def test_float32_autograd_is_compared_at_its_tolerance():
    data = plot_data("exp(x)", ["x=linspace(0, 100, 11)"], dtype="float32")
    # exp(x) > float32 max (3.4e38) from x = 88.7: the exact value is beyond the float range.
    overflow = [s for s in data.shades if s.kind == "overflow"]
    assert [(s.first, s.last) for s in overflow] == [(90.0, 100.0)]
    assert data.ok


@pytest.mark.parametrize(
    "expr, var, message",
    [
        ("softmax(x, dim=0)", ["x=randn(4)"], "couple the elements"),
        ("x*y", ["x=[1.0, 2.0]", "y=[3.0, 4.0]"], "both have several values"),
        ("x*2", ["x=1.5"], "no range to plot over"),
        ("2*pi", [], "no variable"),
    ],
)
def test_refused(expr, var, message):
    with pytest.raises(UsageError, match=message):
        plot_data(expr, var)


def test_bad_order_and_bad_var():
    with pytest.raises(UsageError, match="--order"):
        plot_data("x", order=3)
    with pytest.raises(GradcliError):
        plot_data("x", ["z=1"])


def test_runs_and_shades():
    mask = np.array([True, True, False, True, False, False, True])
    assert runs(mask) == [(0, 1), (3, 3), (6, 6)]
    x = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    bands = shades(x, mask, "unstable", 1)
    assert [(b.start, b.stop, b.points) for b in bands] == [(-0.5, 1.5, 2), (2.5, 3.5, 1), (5.5, 6.5, 1)]
    assert runs(np.zeros(3, dtype=bool)) == []


def test_describe_values():
    assert describe_values(np.array([float("nan")] * 3)) == "nan"
    assert describe_values(np.array([1.0, 1.0])) == "1"
    assert describe_values(np.array([-3.25, 0.5])) == "from -3.25 to 0.5"
    assert describe_values(np.array([float("inf"), 2.0])) == "inf or finite values 2"


def test_value_range_clips_a_few_huge_values():
    values = np.concatenate([np.linspace(0, 1, 1000), [1e9]])
    low, high, clipped = value_range([values])
    assert clipped and -0.2 < low < 0 and 1 < high < 1.2
    low, high, clipped = value_range([np.linspace(0, 1, 100)])
    assert not clipped and low == pytest.approx(-0.05) and high == pytest.approx(1.05)
    assert value_range([np.array([np.nan])]) is None
    assert value_range([np.full(20, 3.0)]) == (2.0, 4.0, False)
