"""`gradcli check` and `gradcli check-function` on the command line: exit status, text, JSON."""

from __future__ import annotations

import json
import re

import pytest

from gradcli.language.library import default_library
from paths import FIXTURES

FUNCTIONS = FIXTURES / "functions.py"


def test_check_json_follows_the_contract(cli):
    result = cli("check", "x*sigmoid(x)", "--var", "x=linspace(-3,3,61)", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert list(doc)[:6] == ["expression", "ok", "order", "symbolic", "variables", "gradcheck"]
    assert doc["expression"] == "x*sigmoid(x)" and doc["ok"] is True and doc["order"] == 1
    assert set(doc["symbolic"]) == {"x"}
    (var,) = doc["variables"]
    assert var["name"] == "x" and var["points"] == 61 and var["skipped_outside_domain"] == 0
    assert var["max_abs_err"] < 1e-14 and var["max_rel_err"] < 1e-12
    assert set(var["worst_at"]) == {"x", "autograd", "exact"}
    assert doc["gradcheck"] == {"ok": True, "fast_mode": False, "message": None, "points": 61,
                                "unreliable_points": 0, "unreliable_reasons": {}}
    assert "gradgradcheck" not in doc


def test_check_order_2_json_has_gradgradcheck(cli):
    doc = json.loads(cli("check", "swish(x)", "--order", "2", "--json").stdout)
    assert doc["gradgradcheck"]["ok"] is True
    assert [v["name"] for v in doc["second_derivatives"]] == ["x,x"]
    assert doc["published"][0]["candidate"] == "published"


def test_log_one_plus_exp_exits_1_and_says_where(cli):
    result = cli("check", "log(1+exp(x))", "--var", "x=linspace(-1000,1000,100001)")
    assert result.exit_code == 1
    assert "PROBLEM: autograd gives nan for x from 709.8 to 1000 where the true d/dx is 1 (14,511 points)" in result.stdout


def test_softplus_exits_0(cli):
    result = cli("check", "softplus(x)", "--var", "x=linspace(-1000,1000,100001)")
    assert result.exit_code == 0, result.stdout
    assert result.stdout.splitlines()[-1].startswith("OK: autograd agrees")


def test_text_output_has_the_derivative_table_and_verdict(cli):
    result = cli("check", "log(x)", "--var", "x=linspace(-2,2,401)")
    assert result.exit_code == 0
    out = result.stdout
    assert "       1\nd/dx = ─\n       x\n" in out  # sympy's pretty print
    assert "201 outside domain" in out
    assert "gradcheck: passed (fast mode, 200 input elements)" not in out  # 200 <= 300: slow mode
    assert "gradcheck: passed (slow mode, 200 input elements)" in out


def test_nothing_in_the_domain_exits_2_with_a_hint(cli):
    result = cli("check", "log(x)", "--var", "x=linspace(-2,-1,5)")
    assert result.exit_code == 2
    assert "outside the domain" in result.stderr and "--var" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_all(cli):
    result = cli("check", "--all", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["ok"] is True
    assert len(doc["results"]) == len(default_library().functions)


def test_check_all_prints_its_one_seed_and_repeats_with_it(cli):
    # Each entry drew a seed of its own and the table printed none: a run could not be repeated.
    text = cli("check", "--all")
    seed = int(re.search(r"gradcli check --all \(order 1, seed (\d+)\)", text.stdout)[1])
    assert cli("check", "--all", "--seed", str(seed)).stdout == text.stdout
    document = json.loads(cli("check", "--all", "--seed", str(seed), "--json").stdout)
    assert {r["seed"] for r in document["results"]} == {seed}


def test_check_all_refuses_fix(cli):
    # --fix rewrites one expression; with --all it was silently ignored and the table printed.
    result = cli("check", "--all", "--fix")
    assert result.exit_code == 2 and "--fix" in result.stderr and result.stdout == ""


def test_check_usage_errors(cli):
    assert cli("check").exit_code == 2
    assert cli("check", "x", "--order", "3").exit_code == 2
    assert cli("check", "--all", "x").exit_code == 2


def test_var_shapes_that_do_not_broadcast_exit_2_with_a_message(cli):
    # An elementwise check takes one value of every variable per point; shapes [2, 3] and [4]
    # used to escape as torch's RuntimeError with a traceback and exit 1.
    result = cli("check", "x + y", "--var", "x=randn(2,3)", "--var", "y=randn(4)")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: check takes one value of every variable per point, and the --var shapes cannot be broadcast "
        "together: x [2, 3], y [4]\n")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_points_all_at_a_kink_compare_nothing_and_exit_2(cli):
    # abs at 0 alone: "OK: autograd agrees with the exact derivative (0 values)", exit 0,
    # passed a check that compared nothing; every point outside the domain was already exit 2.
    result = cli("check", "abs(x)", "--var", "x=[0.0]")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: nothing to compare: every one of the 1 points is at a kink of the "
                                    "derivative (or outside the domain), where autograd is not compared\n")
    assert cli("check", "abs(x)", "--var", "x=[0.0, 1.0]").exit_code == 0  # one point compared


def test_check_function_right(cli):
    result = cli("check-function", f"{FUNCTIONS}:Swish", "--ref", "x*sigmoid(x)", "--order", "2")
    assert result.exit_code == 0, result.stdout
    assert "x = [-6.0, -4.0, -3.0, -1.5, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0, 3.5, 4.0] (default)" in result.stdout


def test_check_function_saved_intermediate(cli):
    result = cli("check-function", f"{FUNCTIONS}:SwishSavedSigmoid", "--var", "x=[0.5]", "--order", "2")
    assert result.exit_code == 1
    # f'' at 0.5 is 0.441229 (0.235004 with σ saved), times the seeded output weight w[0] = 1.47008
    assert "x[0] (= 0.5) -> grad[0]: expected 0.64863, got 0.345468" in result.stdout
    assert "likely cause: right at first order but wrong at second" in result.stdout


def test_check_function_json(cli):
    result = cli("check-function", f"{FUNCTIONS}:MulSwapped", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["gradcheck"]["ok"] is False
    assert doc["first_order"][0]["shown"][0]["element"] == "x[0]"
    assert "wrong order" in doc["causes"][0]["summary"]


def test_check_function_bad_input_exits_2(cli):
    for target in ("nowhere.py:F", f"{FUNCTIONS}:Nope", f"{FUNCTIONS}:NotAFunction"):
        result = cli("check-function", target)
        assert result.exit_code == 2, target
        assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def test_a_backward_torch_refuses_is_a_problem_found_exit_1(cli):
    # Issue 16's contract audit: a wrong number of gradients is a fault of the Function, named
    # in the verdict (it used to be torch's message as a usage error, exit 2).
    result = cli("check-function", f"{FUNCTIONS}:TooFewGradients")
    assert result.exit_code == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == (
        "PROBLEM: contract error: TooFewGradients.backward returns 1 gradient but forward takes 2 inputs (x, y): "
        "return one per input, in order, None for those without a gradient")


def test_nonfinite_numbers_are_floats_in_the_data_and_strings_in_the_json(cli):
    """nan and inf stay floats in a Comparison; only the JSON edge writes them as strings.
    Every verdict and number in the document is checked against torch (autograd, the float64
    formula, gradcheck), sympy (the derivative) and mpmath (its 50-digit value), computed here;
    the key order is the layout docs/json.md describes."""
    import math

    import mpmath
    import sympy
    import torch

    import gradcli

    values = [0.0, 1.0, 800.0]
    # torch: autograd's derivative, and the float64 formula sympy's derivative evaluates to
    x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(torch.log(1 + torch.exp(x)).sum(), x)
    with torch.no_grad():
        formula = torch.exp(x) / (torch.exp(x) + 1)
    s = sympy.Symbol("x", real=True)
    derivative = sympy.diff(sympy.log(1 + sympy.exp(s)), s)
    assert sympy.simplify(derivative - sympy.exp(s) / (sympy.exp(s) + 1)) == 0
    with mpmath.workdps(50):
        exact = [float(sympy.lambdify(s, derivative, "mpmath")(mpmath.mpf(v))) for v in values]
    wrong = [i for i, (a, e) in enumerate(zip(auto.tolist(), exact))
             if not (math.isfinite(a) and abs(a - e) <= 1e-10 + 1e-7 * abs(e))]
    assert wrong == [2] and math.isnan(auto[2].item()) and exact[2] == 1.0
    disagreeing = [i for i, (a, f) in enumerate(zip(auto.tolist(), formula.tolist()))
                   if not (math.isfinite(a) and math.isfinite(f) and abs(a - f) <= 1e-10 + 1e-7 * abs(f))]
    finite = [v for i, v in enumerate(values) if i not in wrong]
    gradchecked = torch.tensor(finite, dtype=torch.float64, requires_grad=True)
    torch_gradcheck = torch.autograd.gradcheck(lambda t: torch.log(1 + torch.exp(t)), (gradchecked,),
                                               raise_exception=False)

    result = gradcli.check("log(1+exp(x))", {"x": "[0.0, 1.0, 800.0]"}, seed=0)
    comparison = result.variables[0]
    assert comparison.max_abs_err == math.inf and comparison.max_rel_err == math.inf
    assert math.isnan(comparison.worst_at["autograd"]) and comparison.worst_at["exact"] == exact[2]
    assert comparison.wrong_ranges[0]["where"] == {"x": [values[2], values[2]]}
    run = cli("check", "log(1+exp(x))", "--var", "x=[0.0, 1.0, 800.0]", "--json", "--seed", "0")
    assert run.exit_code == 1
    assert '"autograd": "nan"' in run.stdout and '"max_abs_err": "inf"' in run.stdout
    document = json.loads(run.stdout)
    assert list(document) == [
        "expression", "ok", "order", "symbolic", "variables", "gradcheck", "dtype", "mode", "points_source",
        "tolerances", "symbolic_second", "second_derivatives", "published", "symbolic_skipped",
        "autograd_error", "problems", "notes", "seed", "causes", "rewrites", "fix", "autograd_nonfinite",
    ]
    assert document["ok"] is (not wrong and torch_gradcheck)
    assert sympy.simplify(sympy.sympify(document["symbolic"]["x"], locals={"x": s}) - derivative) == 0
    (variable,) = document["variables"]
    assert variable["ok"] is False and variable["points"] == len(values)
    assert variable["max_abs_err"] == variable["max_rel_err"] == "inf"  # |nan - 1|
    assert variable["worst_at"] == {"x": values[2], "autograd": "nan", "exact": exact[2]}
    assert variable["wrong"] == len(wrong) and variable["disagreeing"] == len(disagreeing)
    assert variable["arbitrated"] == len(disagreeing) and variable["not_arbitrated"] == 0
    assert variable["float64_formula_wrong"] == 0  # autograd is not right where the formula is not
    assert 0 <= variable["sampled_exact"] <= len(values) - len(disagreeing)
    assert variable["skipped_outside_domain"] == variable["kinks"] == variable["beyond_range"] == 0
    assert variable["wrong_ranges"] == [
        {"where": {"x": [values[2], values[2]]}, "points": len(wrong), "got": "nan", "exact": f"{exact[2]:g}"}]
    assert document["gradcheck"]["ok"] is torch_gradcheck and document["gradcheck"]["points"] == len(finite)
    assert document["problems"] == [
        f"autograd gives nan for x = {values[2]:g} where the true d/dx is {exact[2]:g} ({len(wrong)} point)"]
    assert document["dtype"] == "float64" and document["mode"] == "elementwise"
    assert document["autograd_nonfinite"] == sum(not math.isfinite(a) for a in auto.tolist())


def test_one_wrong_point_is_one_point(cli):
    # The line under the table read "(1 points)".
    result = cli("check", "log(sum(exp(x), dim=1)).sum()", "--var", "x=[[800.0, 1.0], [1.0, 2.0]]")
    assert result.exit_code == 1
    assert "x: autograd gives nan for x[0, 0], exact 1 (1 point)\n" in result.stdout


def test_one_compared_value_and_one_coupling_operation_read_in_the_singular(cli):
    one = cli("check", "sqrt(x)", "--var", "x=[-1.0, 0.0, 1.0]")
    assert one.exit_code == 0
    assert "autograd agrees with the exact derivative (1 value, max rel err 0)" in one.stdout
    coupled = cli("check", "sum(x*x, dim=0)", "--var", "x=[[1.0, 2.0], [3.0, 4.0]]", "--json")
    notes = " ".join(json.loads(coupled.stdout)["notes"])
    assert "sum couples the elements: the gradient of sum(w*y)" in notes
    undefined = cli("check", "sqrt(x)", "--var", "x=[-1.0, 0.0]")
    assert undefined.exit_code == 2
    assert "(outside the domain of the function or of its derivative)" in undefined.stderr


def test_an_unavailable_device_is_exit_2_not_a_traceback(cli, monkeypatch):
    # trace and grads refused it; check ran on until torch's CUDA initialisation raised (exit 1).
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = cli("check", "x*x", "--device", "cuda")
    assert result.exit_code == 2 and result.stdout == ""
    assert "--device cuda: no CUDA device is available here" in result.stderr and "Traceback" not in result.stderr


def test_the_seed_is_printed_when_every_value_comes_from_var_and_repeats_the_run(cli):
    # It still picks gradgradcheck's random output gradients and the 50-digit sample.
    first = cli("check", "x*sigmoid(x)", "--var", "x=[1.0, 2.0]", "--order", "2")
    assert first.exit_code == 0
    points = first.stdout.splitlines()[1]
    assert points.startswith("points: x=[1.0, 2.0] (--var); seed ")
    seed = points.rsplit(" ", 1)[1]
    again = cli("check", "x*sigmoid(x)", "--var", "x=[1.0, 2.0]", "--order", "2", "--seed", seed)
    assert again.stdout == first.stdout
    drawn = cli("check", "x*sigmoid(x)", "--seed", "4").stdout.splitlines()[1]
    assert drawn.count("seed") == 1 and "(seed 4)" in drawn  # said once, where the points were drawn


@pytest.mark.parametrize("written, count", [("2000", 2000), ("2e3", 2000), ("2_000", 2000)])
def test_points_read_as_people_write_large_counts(cli, written, count):
    result = cli("check", "x*sigmoid(x)", "--points", written, "--seed", "0", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["variables"][0]["points"] == count + 11  # and the 11 special points


@pytest.mark.parametrize("written, message", [("2.5", "is not a whole number"), ("inf", "is not a whole number"),
                                              ("1e300", "is too large to count"), ("many", "is not a whole number")])
def test_points_that_are_no_count_are_refused(cli, written, message):
    result = cli("check", "x*sigmoid(x)", "--points", written)
    assert result.exit_code == 2 and message in result.stderr
