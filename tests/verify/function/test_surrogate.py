"""check-function --expect-grad: declared (surrogate) gradients, right and wrong, from Python and the CLI."""

from __future__ import annotations

import json

import pytest
import torch

from gradcli import check_function
from gradcli.errors import UsageError
from gradcli.verify.function.userfile import DEFAULT_INPUT
from paths import FIXTURES

TRANSFORMS = FIXTURES / "transform_functions.py"
STE = "where(abs(x) <= 1, grad_output, 0)"


def run(name: str, *expect: str, **options):
    return check_function(f"{TRANSFORMS}:{name}", expect_grad=expect, **options)


def test_without_a_declaration_a_gradient_reversal_is_a_flipped_sign():
    result = run("GradientReversal")
    assert not result.ok and "the sign is flipped" in result.causes[0].summary
    # The cause names the declaration that would make it right, and that declaration passes.
    declared = result.causes[0].summary.split("--expect-grad '")[1].rstrip("')")
    assert declared == "x=-grad_output" and run("GradientReversal", declared).ok


def test_a_scaled_reversal_names_its_declaration_and_a_flipped_sin_names_none():
    result = run("GradientReversalScaled")
    assert result.causes[0].summary.startswith("backward's gradient for x is -0.5 times the true one")
    declared = result.causes[0].summary.split("--expect-grad '")[1].rstrip("')")
    assert declared == "x=-0.5*grad_output" and run("GradientReversalScaled", declared).ok
    # sin with backward -cos: forward does not pass x through, so no declaration is offered.
    flipped = check_function(f"{FIXTURES / 'functions.py'}:SinFlipped")
    assert [c.summary for c in flipped.causes] == ["the sign is flipped: backward returns minus the true gradient for x"]


def test_a_gradient_reversal_layer_agrees_with_its_declared_gradient():
    result = run("GradientReversal", "-grad_output")
    assert result.ok, str(result)
    (check,) = result.surrogates
    assert (check.name, check.expression, check.count, check.max_abs_err) == ("x", "-grad_output", 0, 0.0)
    assert result.gradcheck.ok is None and not result.first  # no finite differences for x
    assert "x: finite differences are not used, its gradient is declared by --expect-grad" in result.notes
    assert result.verdict().endswith("agrees with the declared gradient of x")


def test_a_gradient_reversal_that_forgot_the_minus_differs_everywhere():
    result = run("GradientReversalWrong", "x=-grad_output")
    assert not result.ok
    (check,) = result.surrogates
    assert check.count == 14
    # grad_output is drawn from the seed: the declared value is its negation, backward returns it.
    grad_output = torch.randn(14, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert check.shown[0] == (f"x[0] (= -6): declared {-grad_output[0].item():.6g}, "
                              f"backward {grad_output[0].item():.6g}")
    assert check.max_abs_err == pytest.approx(2 * grad_output.abs().max().item(), abs=1e-15)


def test_a_straight_through_sign_estimator_right_and_unclipped():
    assert run("SignSTE", STE).ok
    wrong = run("SignSTEUnclipped", STE)
    assert not wrong.ok
    (check,) = wrong.surrogates
    outside = [j for j, v in enumerate(DEFAULT_INPUT) if abs(v) > 1]  # -6, -4, -3, -1.5, 1.5, 3, 3.5, 4
    assert check.count == len(outside) == 8
    assert [s.split(":")[0] for s in check.shown] == [f"x[{j}] (= {DEFAULT_INPUT[j]:g})" for j in outside][:len(check.shown)]


def test_a_number_input_is_a_variable_of_the_declaration():
    assert run("GradientReversalScaled", "-lambd*grad_output").ok
    assert not run("GradientReversalScaled", "-grad_output").ok


def test_a_declared_input_beside_one_checked_by_finite_differences():
    result = run("RoundTimesWeight", "x=grad_output*w")
    assert result.ok, str(result)
    assert [c.name for c in result.first] == ["w"] and result.gradcheck.ok is True
    assert result.gradcheck.points == len(DEFAULT_INPUT)  # w only
    assert [c.name for c in result.surrogates] == ["x"]
    wrong = run("RoundTimesWeight", "x=grad_output")
    assert not wrong.ok and wrong.surrogates[0].count == len(DEFAULT_INPUT)  # w = 1.2 * (rolled inputs) is never 1


@pytest.mark.parametrize("name, expect, message", [
    ("RoundTimesWeight", ("grad_output*w",), "forward has 2 tensor inputs; say whose gradient this is"),
    ("RoundTimesWeight", ("z=grad_output",), "forward has no input 'z'"),
    ("GradientReversalScaled", ("lambd=grad_output",), "'lambd' is not a floating tensor input"),
    ("GradientReversal", ("x=-grad_output", "x=grad_output"), "--expect-grad x: given twice"),
    ("GradientReversal", ("-grad_out",), "'grad_out' is neither grad_output nor an input of forward"),
])
def test_bad_declarations_are_usage_errors(name, expect, message):
    with pytest.raises(UsageError) as info:
        run(name, *expect)
    assert message in info.value.render()


def test_expect_grad_with_ref_is_refused_for_now():
    with pytest.raises(UsageError, match="--expect-grad and --ref cannot be combined"):
        run("GradientReversal", "-grad_output", ref="x")


def test_the_cli_option_exit_statuses_and_json(cli):
    ok = cli("check-function", f"{TRANSFORMS}:SignSTE", "--expect-grad", STE)
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert f"declared gradient [x] = {STE}: backward agrees (max abs err 0)" in ok.stdout
    wrong = cli("check-function", f"{TRANSFORMS}:SignSTEUnclipped", "--expect-grad", f"x={STE}", "--json")
    assert wrong.exit_code == 1
    doc = json.loads(wrong.stdout)
    assert doc["expected_gradients"][0]["input"] == "x" and doc["expected_gradients"][0]["mismatches"] == 8
    assert doc["gradcheck"]["ok"] is None
    bad = cli("check-function", f"{TRANSFORMS}:RoundTimesWeight", "--expect-grad", "grad_output")
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ")
