"""Issue 18, section 3: inputs that crashed gradcli with a traceback (or a wrong exit status).

Each is now an exit-2 message that names what is wrong, or a right result.
"""

from __future__ import annotations

import json

import pytest
import torch
from paths import FIXTURES

HOSTILE = FIXTURES / "hostile_functions.py"


def refused(result, message: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


# -- seeds ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [
    ["trace", "x.sum()"], ["check", "x"], ["plot", "x", "--terminal"], ["check-function", f"{HOSTILE}:Sqrt"],
])
def test_a_seed_beyond_64_bits_is_refused(cli, command):
    refused(cli(*command, "--seed", str(2**64)), "outside the seeds torch takes (-2**63 to 2**63 - 1)")


def test_the_largest_seed_torch_takes_runs(cli):
    result = cli("trace", "x.sum()", "--var", "x=randn(2)", "--seed", str(2**63 - 1), "--json")
    assert result.exit_code == 0
    expected = torch.randn(2, generator=torch.Generator().manual_seed(2**63 - 1), dtype=torch.float64)
    assert json.loads(result.stdout)["leaves"][0]["value"] == expected.tolist()


# -- --var values the dtype cannot hold, or that hold nothing ---------------------------------------
@pytest.mark.parametrize(("spec", "dtype", "message"), [
    ("full(3, 1e300)", "float32", "the values reach 1e+300, beyond float32's largest value 3.40282e+38"),
    ("linspace(-1e300,1e300,5)", "float16", "beyond float16's largest value 65504"),
    ("arange(0, 70000)", "float16", "the values reach 69999, beyond float16's largest value 65504"),
    ("[[1e300, 1]]", "float32", "beyond float32's largest value"),
    ("uniform(-1e300,1e300,3)", "bfloat16", "beyond bfloat16's largest value"),
])
def test_values_beyond_the_dtype_are_refused(cli, spec, dtype, message):
    refused(cli("trace", "x.sum()", "--var", f"x={spec}", "--dtype", dtype), message)


def test_the_largest_float16_value_is_accepted(cli):
    result = cli("trace", "x.sum()", "--var", "x=arange(65500, 65505)", "--dtype", "float16", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["leaves"][0]["value"][-1] == 65504.0


def test_a_grad_output_beyond_the_dtype_is_refused(cli):
    result = cli("trace", "x*2", "--var", "x=[1.0, 2.0]", "--grad-output", "full(2, 1e300)", "--dtype", "float32")
    refused(result, "beyond float32's largest value")


def test_arange_with_the_wrong_sign_is_refused(cli):
    refused(cli("trace", "x.sum()", "--var", "x=arange(0,1,-1)"), "a step of -1 never goes from 0 to 1")


@pytest.mark.parametrize("spec", ["linspace(-1e308,1e308,11)", "arange(-1.7e308,1.7e308,1e307)",
                                  "uniform(-1e308,1e308,4)"])
def test_a_range_wider_than_a_float64_is_refused(cli, spec):
    refused(cli("trace", "x.sum()", "--var", f"x={spec}"), "is wider than a float64 can hold")


@pytest.mark.parametrize("command", [["check", "softmax(x, dim=0)"], ["check", "sin(x)"],
                                     ["check-function", f"{HOSTILE}:Sqrt"]])
def test_an_empty_variable_is_refused_by_the_checks(cli, command):
    refused(cli(*command, "--var", "x=zeros(3,0)"), "--var x=zeros(3,0) has no elements: there is nothing to check")


def test_trace_still_takes_an_empty_variable(cli):
    result = cli("trace", "x.sum()", "--var", "x=zeros(0)", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["result"]["value"] == 0.0


# -- constants ---------------------------------------------------------------------------------------
def test_an_integer_constant_beyond_int64_is_the_float_it_is(cli):
    result = cli("trace", "(x + 2**70).sum()", "--var", "x=[1.0, 2.0]", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["result"]["value"] == (torch.tensor([1.0, 2.0], dtype=torch.float64) + 2.0**70).sum().item()
    assert document["leaves"][0]["grad"] == [1.0, 1.0]


def test_a_large_integer_constant_checks(cli):
    result = cli("check", "x * 100000000000000000000000", "--var", "x=[1.0, 2.0]")
    assert result.exit_code == 0, result.stdout


def test_a_float_constant_above_the_limit_is_refused(cli):
    refused(cli("check", "x + 1e301"), "the number is larger than 1e+300")
    assert cli("trace", "x + 1e300").exit_code == 0


@pytest.mark.parametrize("expression", ["x/0", "x/(x-x)", "sin(x)/0.0", "softmax(x/0, dim=0)"])
def test_division_by_a_constant_zero_is_refused_before_the_exact_evaluator(cli, expression):
    refused(cli("check", expression), "division by zero: the expression is undefined wherever it is evaluated")


# -- tolerances ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("option", "value"), [("--atol", "-1"), ("--rtol", "nan"), ("--rtol", "inf")])
def test_a_tolerance_that_is_not_one_is_refused(cli, option, value):
    refused(cli("check", "x", option, value), f"{option} {float(value)} is not a tolerance")


def test_a_zero_tolerance_is_exact_agreement(cli):
    assert cli("check", "x*x", "--var", "x=[1.0, 2.0]", "--atol", "0", "--rtol", "0").exit_code == 0


# -- the user's own backward -----------------------------------------------------------------------------
def test_check_function_json_carries_nan_and_inf_as_strings(cli):
    result = cli("check-function", f"{HOSTILE}:Sqrt", "--var", "x=[0.0, 1.0, -1.0]", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert document["inputs"]["x"] == [0.0, 1.0, -1.0]
    assert document["first_order"][0]["max_abs_err"] in ("nan", "inf")


def test_a_backward_that_calls_sys_exit_is_reported(cli):
    refused(cli("check-function", f"{HOSTILE}:ExitsInBackward"), "ExitsInBackward.backward raised SystemExit: 0")


def test_a_backward_that_raises_at_order_2_is_reported(cli):
    assert cli("check-function", f"{HOSTILE}:RaisesInDoubleBackward").exit_code == 0
    refused(cli("check-function", f"{HOSTILE}:RaisesInDoubleBackward", "--order", "2"),
            "RaisesInDoubleBackward.backward raised ValueError: no double backward here (at hostile_functions.py")


# -- plot and the library's domains ------------------------------------------------------------------------
def test_a_plot_axis_wider_than_a_float64_is_refused(cli):
    refused(cli("plot", "x", "--var", "x=[-1e308, 1e308]", "--terminal"),
            "the x axis from -1e+308 to 1e+308 is wider than a float64 can hold")


def test_a_plot_over_a_huge_but_measurable_range_draws(cli):
    result = cli("plot", "x", "--var", "x=linspace(-1e300, 1e300, 11)", "--terminal")
    assert result.exit_code == 0 and "agrees with the exact derivative at 11 points" in result.stdout


def test_a_library_domain_beyond_the_constant_limit_is_refused(cli, tmp_path):
    (tmp_path / "wide.toml").write_text(
        '[wide]\nsignature = "wide(x)"\nbody = "x"\ndoc = "d"\nsource = "s"\ndomain = [-1.7e308, 1.7e308]\n'
    )
    refused(cli("check", "wide(x)", "--library", str(tmp_path)), "domain must be [low, high]: numbers up to 1e+300")
