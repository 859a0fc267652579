"""issue 15 in check's exact mode (softmax, matmul, reductions over a dim): the cause is named
from the evidence on the whole tensors, at the right node and elements, and a derivative
that is truly undefined is confirmed by sympy and mpmath both (verify/causes/elements.py,
exact/undefined.py)."""

from __future__ import annotations

import math

import pytest
import sympy

import gradcli
from gradcli.exact.undefined import Verdict, Witness, decide
from paths import ROOT

# (report, expression, --var, dtype, order, node, source, the elements named, proven fix)
EXACT = [
    ("scae-pytorch #4: logsumexp over a dim", "log(sum(exp(x), dim=1)).sum()", "x=[[800.0, 1.0], [1.0, 2.0]]",
     "float64", 1, "ExpBackward0", "exp(x)", "x[0, 0] = 800", "logsumexp(x, dim=1).sum()"),
    ("scae-pytorch #4, float32 from 88.7", "log(sum(exp(x), dim=0))", "x=[89.0, 1.0, 2.0]", "float32", 1,
     "ExpBackward0", "exp(x)", "x[0] = 89", "logsumexp(x, dim=0)"),
    ("scae-pytorch #4, second order", "log(sum(exp(x), dim=0))", "x=[1000.0, 1.0]", "float64", 2,
     "ExpBackward0", "exp(x)", "x[0] = 1000", "logsumexp(x, dim=0)"),
    ("pytorch #20972: log of an underflowed softmax", "log(softmax(x, dim=1)).sum()",
     "x=[[-1000.0, 0.0], [1.0, 2.0]]", "float64", 1, "LogBackward0", "log(softmax(x, dim=1))", "x[0, 0] = -1000",
     "log_softmax(x, dim=1).sum()"),
    ("pytorch #20972, float32", "log(softmax(x, dim=0)).sum()", "x=[-200.0, 0.0, 1.0]", "float32", 1,
     "LogBackward0", "log(softmax(x, dim=0))", "x[0] = -200", "log_softmax(x, dim=0).sum()"),
    ("burn #5373 through a matmul", "log(1 + exp(x @ y)).sum()", "x=[[1000.0, 1.0], [1.0, 2.0]]", "float64", 1,
     "ExpBackward0", "exp(x @ y)", "x[0, 0] = 1000", "softplus(x @ y).sum()"),
]


@pytest.mark.parametrize("report, expr, var, dtype, order, node, source, element, fix", EXACT,
                         ids=[row[0] for row in EXACT])
def test_exact_mode_names_the_cause_at_its_node_and_elements(report: str, expr: str, var: str, dtype: str, order: int,
                                                             node: str, source: str, element: str, fix: str) -> None:
    extra = ["y=[1.0, 0.0]"] if "y" in expr else []
    result = gradcli.check(expr, [var, *extra], dtype=dtype, order=order, seed=0)
    assert result.mode == "exact" and not result.ok
    first = next(c for c in result.causes if c.derivative == "x")
    assert first.kind == "overflow", first.summary
    assert (first.node, first.source) == (node, source)
    assert element in first.summary
    if order == 2:
        assert any(c.derivative == "x,x" and c.kind == "overflow" for c in result.causes)
    assert result.fix == fix
    assert gradcli.check(fix, [var, *extra], dtype=dtype, order=order, seed=0).ok


def test_the_overflow_is_the_zero_times_inf_of_backward() -> None:
    """The evidence behind the words: exp(800) is inf, and the sum's gradient of 0 meets it."""
    result = gradcli.check("log(sum(exp(x), dim=1)).sum()", ["x=[[800.0, 1.0], [1.0, 2.0]]"], seed=0)
    (cause,) = result.causes
    assert cause.points == 1 and cause.where == {"x": [800.0, 800.0]}
    assert [(f["node"], f["value"]) for f in cause.factors] == [("SumBackward1", "0"), ("ExpBackward0", "inf")]
    assert cause.examples == [{"element": "x[0, 0]", "x": 800.0, "autograd": pytest.approx(math.nan, nan_ok=True),
                               "exact": 1.0}]


def test_the_underflow_is_named_at_the_softmax_that_made_the_zero() -> None:
    result = gradcli.check("log(softmax(x, dim=0)).sum()", ["x=[-1000.0, 0.0, 1.0]"], seed=0)
    (cause,) = result.causes
    assert cause.summary.startswith("softmax(x, dim=0) underflows to 0 in float64")
    assert cause.points == 3  # every element's gradient goes through the one log(0)


def test_a_norm_at_a_zero_row_is_truly_undefined_not_a_refusal() -> None:
    """Before: exit 2, 'the derivative is undefined at the given values'. The norm of the zero
    row has no derivative (0/0), the other row has one: checked, and the zero row's elements
    are named undefined, held out of gradcheck, with the safe norm offered with its trade-off."""
    result = gradcli.check("sqrt(sum(x**2, dim=1)).sum()", ["x=[[0.0, 0.0], [1.0, 2.0]]"], seed=0)
    assert result.ok, str(result)
    (cause,) = result.causes
    assert cause.kind == "undefined" and not cause.is_bug and cause.points == 2
    assert [e["element"] for e in cause.examples] == ["x[0, 0]", "x[0, 1]"]
    assert all((e["sympy"], e["mpmath"]) == ("nan", "a division by zero") for e in cause.examples)
    assert result.variables[0].points == 2 and result.variables[0].skipped_outside_domain == 2
    assert result.gradcheck.ok
    assert cause.rewrite is not None and cause.rewrite["rule"] == "safe_norm"


def test_an_underflowed_function_is_not_taken_for_a_domain_error() -> None:
    """float64 says log(softmax(-1000)) is log(0): at 50 digits it is -1000.69, defined."""
    result = gradcli.check("log(softmax(x, dim=0)).sum()", ["x=[-1000.0, 0.0, 1.0]"], seed=0)
    assert result.variables[0].skipped_outside_domain == 0 and result.variables[0].wrong == 3


def test_the_exact_cli_run_names_the_cause_and_exits_1() -> None:
    from typer.testing import CliRunner

    from gradcli.cli.app import app

    run = CliRunner().invoke(app, ["check", "log(sum(exp(x), dim=0))", "--var", "x=[1000.0, 1.0, 2.0]"],
                             env={"COLUMNS": "200"})
    assert run.exit_code == 1, run.output
    assert "cause of d/dx at 1 point (x = 1000): overflow: exp(x) overflows" in run.output
    assert "fix: logsumexp(x, dim=0)" in run.output


# ---- (b) truly undefined: sympy and mpmath, each asked on its own ----------------------------------

x, y = sympy.symbols("x y", real=True)
BIG = 1.7976931348623157e308


@pytest.mark.parametrize("function, derivative, args, sympy_text", [
    (sympy.sqrt(x), 1 / (2 * sympy.sqrt(x)), [0.0], "zoo"),
    (sympy.log(x), 1 / x, [0.0], "the function is zoo"),
    (sympy.asin(x), 1 / sympy.sqrt(1 - x**2), [1.0], "zoo"),
    (sympy.acosh(x), 1 / sympy.sqrt(x**2 - 1), [1.0], "zoo"),
    (x ** sympy.Rational(1, 3), x ** sympy.Rational(-2, 3) / 3, [0.0], "zoo"),
    # x/sqrt(x**2 + y**2) at (0, 0): substituting x first would give 0; both at once give nan
    (sympy.sqrt(x**2 + y**2), x / sympy.sqrt(x**2 + y**2), [0.0, 0.0], "nan"),
    (sympy.sqrt(x), 1 / (2 * sympy.sqrt(x)), [-1.0], "the function is 1.0*I (not real)"),
])
def test_both_witnesses_find_it_undefined(function, derivative, args, sympy_text) -> None:
    symbols = [x, y][:len(args)]
    verdict = decide(function, derivative, symbols, args, BIG)
    assert verdict.sympy.text == sympy_text and verdict.sympy.not_finite
    assert verdict.mpmath.not_finite
    assert verdict.agree and verdict.truly_undefined and verdict.value is None


def test_both_witnesses_find_a_finite_value_beyond_the_range() -> None:
    verdict = decide(sympy.exp(x), sympy.exp(x), [x], [800.0], BIG)
    assert (verdict.sympy.state, verdict.mpmath.state) == ("beyond_range", "beyond_range")
    assert verdict.agree and not verdict.truly_undefined
    assert verdict.mpmath.text == "2.72637e+347"  # e**800, by hand: 800/ln(10) = 347.436...


def test_a_finite_derivative_gives_its_value() -> None:
    verdict = decide(sympy.log(sympy.sigmoid(x)) if hasattr(sympy, "sigmoid") else sympy.log(1 / (1 + sympy.exp(-x))),
                     1 - 1 / (1 + sympy.exp(-x)), [x], [-800.0], BIG)
    assert verdict.value == pytest.approx(1.0)


def test_witnesses_that_disagree_do_not_agree() -> None:
    one = Verdict(Witness("finite", "0.0"), Witness("undefined", "a division by zero"), None)
    assert not one.agree and not one.truly_undefined
    both = Verdict(Witness("infinite", "zoo"), Witness("undefined", "a division by zero"), None)
    assert both.agree and both.truly_undefined


def test_the_report_says_both_agree() -> None:
    result = gradcli.check("sqrt(x)", ["x=linspace(0,2,41)"], seed=0)
    (cause,) = result.causes
    assert "sympy (zoo) and mpmath at 50 digits (a division by zero) agree" in cause.summary
    assert cause.examples[0]["sympy"] == "zoo"


def test_an_unanswered_witness_never_confirms_undefined():
    """sympy timing out (or refusing the form) is no testimony: it must not agree with
    mpmath's "undefined" and turn a point into "truly undefined, not a bug"."""
    from gradcli.exact.undefined import Verdict, Witness

    for other in ("undefined", "infinite", "unsettled"):
        verdict = Verdict(Witness("unsettled", "not settled within 2 s"), Witness(other, "nan"), None)
        assert verdict.truly_undefined is False
    assert Verdict(Witness("undefined", "zoo"), Witness("infinite", "+inf"), None).truly_undefined is True


def test_the_readme_excerpt_of_the_logsumexp_overflow_is_the_real_output(cli):
    # docs/commands/check.md (once the README) quotes the cause and the rewrite as printed (the evidence lines between them
    # were missing); compared word by word, as the report wraps at its width.
    readme = (ROOT / "docs" / "commands" / "check.md").read_text(encoding="utf-8")
    start = readme.index("```\ncause of d/dx at 1 point (x = 800)")
    excerpt = readme[start + len("```\n"):readme.index("```", start + 3)]
    result = cli("check", "log(sum(exp(x), dim=1)).sum()", "--var", "x=[[800.0, 1.0], [1.0, 2.0]]")
    assert result.exit_code == 1
    assert " ".join(excerpt.split()) in " ".join(result.stdout.split())
