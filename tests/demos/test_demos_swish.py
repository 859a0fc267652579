"""`gradcli demo swish`: the numbers it prints against sympy, its verdicts and exit statuses,
and the Swish Function classes (correct and buggy) on their own."""

from __future__ import annotations

import shlex

import pytest
import sympy as sp
import torch
from torch.autograd import gradcheck, gradgradcheck

from gradcli.demos import run_demo
from gradcli.demos.runner import Code
from gradcli.demos.swish_buggy import (
    SwishCallsTensor,
    SwishCtxInput,
    SwishNoBeta,
    SwishSavedSigma,
    SwishTutorial,
    SwishWrongSign,
)
from gradcli.demos.swish_function import Swish, swish

SAMPLES = [-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0]


def sympy_derivatives(beta: float, order: int) -> list[float]:
    """d^order/dx^order of x*sigmoid(beta*x), by sympy, at the demo's sample points."""
    x = sp.Symbol("x")
    f = x / (1 + sp.exp(-sp.nsimplify(beta) * x))
    d = sp.diff(f, x, order)
    return [float(d.subs(x, sp.nsimplify(v)).evalf(30)) for v in SAMPLES]


def table(run, marker: str) -> tuple[list[str], list[list[float]]]:
    """The header and rows of the table printed by the code block containing `marker`."""
    [output] = [b.output for b in run.blocks if isinstance(b, Code) and marker in b.source]
    header, *rows = output.splitlines()
    return header.split(), [[float(v) for v in row.split()] for row in rows]


@pytest.fixture(scope="module")
def demo_beta_1():
    return run_demo("swish")


def test_demo_agrees_everywhere_at_beta_1(demo_beta_1):
    assert demo_beta_1.ok
    assert [v.ok for v in demo_beta_1.verdicts] == [True] * 6


def test_printed_first_derivative_matches_sympy(demo_beta_1):
    header, rows = table(demo_beta_1, "grads = {")
    assert header == ["x", "Swish", "autograd", "sympy", "F.silu"]
    assert [row[0] for row in rows] == SAMPLES
    expected = sympy_derivatives(1.0, 1)
    for column in range(1, 5):
        assert [row[column] for row in rows] == pytest.approx(expected, abs=5e-7)
    assert expected[SAMPLES.index(0.5)] == pytest.approx(0.7399611873, abs=1e-10)


def test_printed_second_derivative_matches_sympy(demo_beta_1):
    header, rows = table(demo_beta_1, "(g2,) = torch.autograd.grad(g.sum(), t)")
    assert header == ["x", "Swish", "sympy"]
    expected = sympy_derivatives(1.0, 2)
    assert [row[1] for row in rows] == pytest.approx(expected, abs=5e-7)
    assert [row[2] for row in rows] == pytest.approx(expected, abs=5e-7)


def test_sympy_step_shows_the_papers_form(demo_beta_1):
    outputs = {b.source.splitlines()[-1]: b.output for b in demo_beta_1.blocks if isinstance(b, Code) and b.output}
    assert outputs["sp.simplify(df - paper)"] == "0"
    assert outputs["sp.simplify(df)"] == "(beta*x + exp(beta*x) + 1)/(4*cosh(beta*x/2)**2)"


def test_float32_gradcheck_warns_and_fails_with_the_explanation(demo_beta_1):
    [output] = [b.output for b in demo_beta_1.blocks if isinstance(b, Code) and "(x32, BETA)" in b.source]
    assert output.startswith("UserWarning: Input #0 requires gradient and is not a double precision")
    assert output.endswith("False")
    [slopes] = [b.output for b in demo_beta_1.blocks if isinstance(b, Code) and "x0 + eps" in b.source]
    assert "torch.float32: x0 + eps = 0.5000010133, slope 0.730156" in slopes
    assert "torch.float64: x0 + eps = 0.5000010000, slope 0.7399611873" in slopes


def test_other_beta_drops_silu_and_still_matches_sympy():
    run = run_demo("swish", beta=1.5)
    assert run.ok
    header, rows = table(run, "grads = {")
    assert header == ["x", "Swish", "autograd", "sympy"]
    expected = sympy_derivatives(1.5, 1)
    for column in range(1, 4):
        assert [row[column] for row in rows] == pytest.approx(expected, abs=5e-7)


def test_cli_exit_statuses(cli):
    result = cli("demo", "swish")
    assert result.exit_code == 0
    assert "class Swish(torch.autograd.Function):" in result.stdout
    assert "OK: Swish agrees with gradcheck, gradgradcheck, the reference swish(input, beta)" in result.stdout
    assert result.stdout.rstrip().endswith("All 6 checks agreed.")
    assert "(d)" not in result.stdout  # the mistakes only with --buggy


def test_buggy_catches_each_mistake_and_exits_1(cli):
    result = cli("demo", "swish", "--buggy")
    assert result.exit_code == 1
    out = result.stdout
    assert "TypeError: unsupported operand type(s) for *: 'float' and 'builtin_function_or_method'" in out
    assert "TypeError: 'Tensor' object is not callable" in out
    assert "    return grad_output * (tmp + ctx.beta * input * tmp(1 - tmp)), None" in out
    # check_function names each wrong entry: expected (finite differences, sympy) vs got
    assert "input[1] (= 0.5) -> out[1]: expected 0.739961, got 1.12742" in out  # (1 + tmp)
    assert "input[1] (= 0.5) -> out[1]: expected 0.8426, got 0.788126" in out  # no β, at β = 1.5
    # saved σ: f'' at 0.5, 0.441229 (NOTES.md: 0.2350 with σ saved), times the output weight
    # w[1] = 1.20785 that the second order differentiates sum(w * out) with (seed 0)
    assert "input[1] (= 0.5) -> grad[1]: expected 0.532925, got 0.283842" in out
    assert "#> likely cause: right at first order but wrong at second" in out
    assert "is at version 1; expected version 0 instead" in out
    assert "6 of 13 checks failed:" in out
    # The suggested path is the installed file's (relative only inside a checkout).
    from gradcli.demos.runner import source_path

    path = shlex.quote(source_path("swish_buggy"))
    assert f"$ gradcli check-function {path}:SwishSavedSigma --ref 'swish(input, beta)' --order 2" in out
    failed = out[out.index("6 of 13 checks failed:"):].splitlines()[1:]
    assert [line.split()[1] for line in failed] == [
        "SwishTutorial's", "SwishCallsTensor's", "SwishWrongSign", "SwishNoBeta", "SwishSavedSigma", "SwishCtxInput",
    ]


def test_buggy_run_verdicts():
    run = run_demo("swish", buggy=True)
    assert not run.ok
    by_text = {v.text: v.ok for v in run.verdicts}
    assert by_text["SwishSavedSigma passes gradcheck (its first derivative is right)"] is True
    assert by_text["SwishSavedSigma passes gradgradcheck"] is False
    assert by_text["SwishNoBeta passes gradcheck at β = 1.5"] is False
    assert sum(not ok for ok in by_text.values()) == 6


# --- the classes themselves ---------------------------------------------------------------


@pytest.mark.parametrize("beta", [1.0, 1.5, -0.7, 4.0])
def test_swish_passes_gradcheck_and_gradgradcheck(beta):
    torch.manual_seed(1)
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert gradcheck(Swish.apply, (x, beta))
    assert gradgradcheck(Swish.apply, (x, beta))
    torch.testing.assert_close(swish(x, beta), x * torch.sigmoid(beta * x))


def test_swish_beta_gets_no_gradient_and_input_is_saved_properly():
    x = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
    y = Swish.apply(x, 2.0)
    assert y.grad_fn.name() == "SwishBackward"
    assert len(y.grad_fn.next_functions) == 1  # beta is a Python number: no edge, gradient None
    assert len(y.grad_fn.saved_tensors) == 1


def x3():
    return torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("cls, message", [
    (SwishTutorial, "unsupported operand type(s) for *: 'float' and 'builtin_function_or_method'"),
    (SwishCallsTensor, "'Tensor' object is not callable"),
])
def test_tutorial_bugs_raise_type_error_in_backward(cls, message):
    x = x3()
    y = cls.apply(x, 1.0)  # forward is fine
    with pytest.raises(TypeError) as err:
        y.sum().backward()
    assert str(err.value) == message


def test_wrong_formula_and_missing_beta_fail_gradcheck_only_where_expected():
    assert not gradcheck(SwishWrongSign.apply, (x3(), 1.0), raise_exception=False)
    assert gradcheck(SwishNoBeta.apply, (x3(), 1.0))  # β = 1 hides the missing factor
    assert not gradcheck(SwishNoBeta.apply, (x3(), 1.5), raise_exception=False)


def test_saved_sigma_is_caught_only_by_gradgradcheck():
    assert gradcheck(SwishSavedSigma.apply, (x3(), 1.0))
    assert not gradgradcheck(SwishSavedSigma.apply, (x3(), 1.0), raise_exception=False)
    x = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(SwishSavedSigma.apply(x, 1.0), x, create_graph=True)
    (g2,) = torch.autograd.grad(g.sum(), x)
    assert g2.item() == pytest.approx(0.2350037122, abs=1e-9)  # σ(1-σ) at 0.5: σ's own derivative lost
    assert sympy_derivatives(1.0, 2)[SAMPLES.index(0.5)] == pytest.approx(0.4412290270, abs=1e-9)


def test_ctx_input_silently_uses_values_changed_in_place():
    x = x3()
    h = x.clone()
    y = SwishCtxInput.apply(h, 1.0)
    h.mul_(10)
    (grad,) = torch.autograd.grad(y.sum(), x)
    expected_wrong = torch.sigmoid(10 * x) * (1 + 10 * x * (1 - torch.sigmoid(10 * x)))
    torch.testing.assert_close(grad, expected_wrong.detach())


def test_the_printed_check_function_result_is_wrapped_once_under_its_prefix():
    # str(result) is laid out at the demo's room (100 - '    #> '), so no line is wrapped a second
    # time into a hanging fragment ("#>     abs err").
    from typer.testing import CliRunner

    from gradcli.cli import app

    shown = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"}).invoke(app, ["demo", "swish"]).stdout
    block = shown[shown.index("    print(result)\n"):shown.index("check_function: Swish agrees")]
    lines = [line for line in block.splitlines() if line.startswith("    #>")]
    assert len(lines) > 10 and all(len(line) <= 100 for line in lines)
    assert not [line for line in lines if line.startswith("    #>     ")]
    assert "    #> first derivatives: your backward vs finite differences [input]: ok (max abs err 2.9e-11)" in lines
