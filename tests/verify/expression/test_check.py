"""gradcli.check: autograd against the exact derivative, on points chosen or given."""

from __future__ import annotations

import math

import pytest

from gradcli.errors import DomainError, UsageError
from gradcli.language.library import default_library
from gradcli.exact import elementwise
from gradcli import check
from gradcli.exact.symbolic import SymbolicTimeout, within

LIBRARY = sorted(default_library().functions)


@pytest.mark.parametrize("name", LIBRARY)
def test_every_library_entry_passes_first_and_second_order(name):
    result = check(f"{name}(x)", order=2, seed=1, simplify=False)
    assert result.ok, str(result)
    assert [c.name for c in result.variables] == ["x"]
    assert [c.name for c in result.second] == ["x,x"]
    assert result.variables[0].points >= 990  # 1000 points over the domain, minus kinks
    assert result.gradcheck.ok and result.gradgradcheck.ok
    entry = default_library().functions[name]
    assert len(result.published) == (1 if entry.derivative is not None else 0)


def test_log_one_plus_exp_is_wrong_above_709_where_the_derivative_is_1():
    result = check("log(1+exp(x))", {"x": "linspace(-1000,1000,100001)"})
    assert not result.ok
    (comparison,) = result.variables
    (wrong,) = comparison.wrong_ranges
    low, high = wrong["where"]["x"]
    assert 709.7 < low < 709.9 and high == 1000.0
    assert wrong["got"] == "nan" and wrong["exact"] == "1"
    assert wrong["points"] == comparison.wrong == 14511  # x = 709.8, 709.82, ..., 1000
    assert "autograd gives nan for x from 709.8 to 1000 where the true d/dx is 1" in result.verdict()


def test_softplus_is_stable_on_the_same_points():
    result = check("softplus(x)", {"x": "linspace(-1000,1000,100001)"})
    assert result.ok, str(result)
    assert result.variables[0].points == 100001 - result.variables[0].kinks
    assert result.variables[0].max_rel_err < 1e-12


def test_float32_fails_where_float64_passes():
    var = {"x": "linspace(-100,100,2001)"}
    assert check("log(1+exp(x))", var).ok
    result = check("log(1+exp(x))", var, dtype="float32")
    assert not result.ok
    low, high = result.variables[0].wrong_ranges[0]["where"]["x"]
    assert 88.6 < low < 88.9 and high == 100.0  # exp overflows float32 beyond 88.72


def test_float32_precision_is_measured_with_float32_tolerances():
    result = check("x*sigmoid(x)", {"x": "linspace(-8,8,1001)"}, dtype="float32")
    assert result.ok, str(result)
    assert result.tolerances == {"rtol": 1e-4, "atol": 1e-6}
    assert 1e-9 < result.variables[0].max_rel_err < 1e-4  # float32 rounding, visible
    assert check("x*sigmoid(x)", {"x": "linspace(-8,8,1001)"}).variables[0].max_rel_err < 1e-12


@pytest.mark.parametrize("expression", ["log(x)", "sqrt(x)"])
def test_points_outside_the_domain_are_skipped_and_counted(expression):
    result = check(expression, {"x": "linspace(-2,2,401)"})
    assert result.ok, str(result)
    (comparison,) = result.variables
    assert comparison.skipped_outside_domain == 201  # -2, ..., -0.01 and 0
    assert comparison.points == 200


def test_no_point_in_the_domain_is_bad_input():
    with pytest.raises(DomainError, match="undefined at every one of the 5 points"):
        check("log(x)", {"x": "linspace(-2,-1,5)"})


def test_kinks_are_reported_not_failed():
    result = check("relu(x) + abs(x - 1)", {"x": "linspace(-2,2,17)"}, order=2)  # 0.25 apart, exact
    assert result.ok, str(result)
    comparison = result.variables[0]
    assert comparison.kinks == 2
    assert [k["x"] for k in comparison.kink_examples] == [0.0, 1.0]
    assert comparison.kink_examples[0]["autograd"] == -1.0  # relu's 0 at its kink, plus abs's slope -1


def test_a_nan_gradient_from_where_is_caught():
    # torch.where's backward multiplies the unused branch's gradient (inf at x < 0) by 0.
    result = check("where(x > 0, sqrt(x), 0)", {"x": "linspace(-1,1,201)"})
    assert not result.ok
    wrong = result.variables[0].wrong_ranges[0]
    low, high = wrong["where"]["x"]
    assert low == -1.0 and -1e-12 < high < 0  # torch's linspace gives -2e-17 for 0
    assert (wrong["got"], wrong["exact"]) == ("nan", "0")


def test_mixed_second_partials():
    result = check("x*y + sin(x*y)", order=2, seed=3)
    assert result.ok, str(result)
    assert [c.name for c in result.second] == ["x,x", "x,y", "y,y"]
    assert result.symbolic_second["x,y"] == "-x*y*sin(x*y) + cos(x*y) + 1"


def test_a_final_mean_is_checked_elementwise():
    result = check("(x*x).mean()", {"x": "randn(3,4)"}, order=2, seed=0)
    assert result.ok and result.mode == "reduced"
    assert result.symbolic == {"x": "x/6"}
    assert result.variables[0].points == 12


@pytest.mark.parametrize("expression, var", [
    ("softmax(x, dim=0)", {"x": "randn(5)"}),
    ("log_softmax(x, dim=1).sum()", {"x": "randn(2,3)"}),
    ("(x @ w).tanh().sum()", {"x": "randn(2,3)", "w": "randn(3,2)"}),
])
def test_coupled_elements_are_checked_exactly_on_small_tensors(expression, var):
    result = check(expression, var, order=2, seed=0)
    assert result.ok, str(result)
    assert result.mode == "exact"
    total = sum(c.points for c in result.variables)
    assert total == sum(math.prod(int(d) for d in s[s.index("(") + 1:-1].split(",")) for s in var.values())


def test_large_coupled_tensors_skip_the_symbolic_comparison_but_run_gradcheck():
    result = check("softmax(x, dim=0)", {"x": "randn(400)"}, seed=0)
    assert result.mode == "skipped" and result.variables == []
    assert "up to 32 elements" in result.symbolic_skipped and "gradcheck still runs" in result.symbolic_skipped
    assert result.gradcheck.ok and result.gradcheck.fast_mode
    assert result.ok


def test_symbolic_overrun_falls_back_to_gradcheck(monkeypatch):
    def slow(*args):
        raise SymbolicTimeout("the symbolic work took longer than 30 s")

    monkeypatch.setattr(elementwise, "formulas", slow)
    result = check("x*sigmoid(x)", seed=0)
    assert result.symbolic_skipped.startswith("the symbolic work took longer than 30 s")
    assert result.gradcheck.ok and result.ok


def test_within_stops_waiting():
    import time

    with pytest.raises(SymbolicTimeout):
        within(0.05, time.sleep, 2)
    assert within(5, sum, [1, 2]) == 3


def test_default_points_include_the_special_points():
    result = check("x*sigmoid(x)", points=10, seed=0)
    assert result.variables[0].points == 21
    assert "10 uniform draws" in result.points_source and "1000" in result.points_source


def test_usage_errors():
    with pytest.raises(UsageError):
        check("x", order=3)
    with pytest.raises(UsageError):
        check("x", points=0)


def test_result_is_readable_in_a_users_test():
    result = check("x*sigmoid(x)", seed=0)
    text = str(result)
    assert text.splitlines()[0] == "check x*sigmoid(x)   (float64, order 1, elementwise)"
    assert "d/dx = " in text and text.splitlines()[-1].startswith("OK: autograd agrees")


@pytest.mark.slow
def test_ten_million_points():
    result = check("x*sigmoid(x)", {"x": "linspace(-50,50,10000000)"})
    assert result.ok and result.variables[0].points == 10_000_000
