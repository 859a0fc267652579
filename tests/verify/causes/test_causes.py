"""issue 15: each problem expression from a real report gets the right cause, and where a
rewrite exists, the rewrite is proven by the same check on the same points.

Each row cites the report it reproduces. `fix` is the rewrite check must prove (None: the
cause is named and no rewrite is claimed)."""

from __future__ import annotations

import pytest

import gradcli
from paths import ROOT

# (report, expression, --var, dtype, order, expected cause kind, expected proven fix)
CORPUS = [
    ("pytorch #68425", "where(x > 0, sqrt(x), 0)", "x=linspace(-2,2,41)", "float64", 1, "leaked_branch",
     "where(x > 0, sqrt(where(x > 0, x, 1.0)), 0)"),
    ("pytorch #187297", "where(x > 0, sqrt(x), x)", "x=linspace(-2,2,41)", "float64", 1, "leaked_branch",
     "where(x > 0, sqrt(where(x > 0, x, 1.0)), x)"),
    ("pytorch #52248", "where(x > 1, 1/x, 0)", "x=[-1.0, 0.0, 2.0]", "float64", 1, "leaked_branch",
     "where(x > 1, 1 / where(x > 1, x, 1.0), 0)"),
    ("jax #347", "where(x*x > 0.25, sqrt(x*x), 1)", "x=[0.0, 1.0, 2.0]", "float64", 1, "leaked_branch",
     "where(x * x > 0.25, abs(where(x * x > 0.25, x, 1.0)), 1)"),
    ("pytorch #23395", "where(x > 0, sqrt(x), x/2)", "x=[16.0, 0.0, -4.0]", "float64", 1, "leaked_branch",
     "where(x > 0, sqrt(where(x > 0, x, 1.0)), x / 2)"),
    ("pytorch #108618", "where(x > 2, log2(x), 2*x)", "x=[0.0, 2.0, 3.0]", "float64", 1, "leaked_branch",
     "where(x > 2, log2(where(x > 2, x, 1.0)), 2 * x)"),
    ("pytorch #156212", "where(x < 10, exp(x), 1)", "x=linspace(0,1000,101)", "float64", 1, "leaked_branch",
     "where(x < 10, exp(where(x < 10, x, 0.0)), 1)"),
    ("tinygrad #12409", "where(x > 0, x*sqrt(x), 0)", "x=linspace(-1,1,21)", "float64", 1, "leaked_branch",
     "where(x > 0, x * sqrt(where(x > 0, x, 1.0)), 0)"),
    ("pytorch NOTES log(1+exp(x)), burn #5373", "log(1+exp(x))", "x=linspace(-1000,1000,2001)", "float64", 1,
     "overflow", "softplus(x)"),
    ("burn #5373 (float32 from 88.7)", "log(1+exp(x))", "x=linspace(-100,100,201)", "float32", 1, "overflow",
     "softplus(x)"),
    ("1bit-MONSTER #628 (float32)", "log(exp(x) + 1)", "x=linspace(-10,100,111)", "float32", 1, "overflow",
     "softplus(x)"),
    ("burn #5373, second order", "log(1+exp(x))", "x=linspace(-1000,1000,2001)", "float64", 2, "overflow",
     "softplus(x)"),
    ("burn #5373, second order float32", "log(1+exp(x))", "x=linspace(-100,100,201)", "float32", 2, "overflow",
     "softplus(x)"),
    ("pytorch #2211 / #1835", "log(sigmoid(x))", "x=linspace(-1000,10,1011)", "float64", 1, "overflow",
     "logsigmoid(x)"),
    ("pytorch #20972 (float32)", "log(sigmoid(x))", "x=linspace(-200,10,211)", "float32", 1, "overflow",
     "logsigmoid(x)"),
    ("scikit-learn #4153", "exp(x)/(1+exp(x))", "x=linspace(-1000,1000,2001)", "float64", 1, "overflow",
     "sigmoid(x)"),
    ("snntorch #433", "1/(1+exp(-x))", "x=linspace(-1000,1000,2001)", "float64", 1, "overflow", "sigmoid(x)"),
    ("snntorch #433 (float32)", "1/(1+exp(-x))", "x=linspace(-100,100,201)", "float32", 1, "overflow",
     "sigmoid(x)"),
    ("jax #13398", "(exp(x)-exp(-x))/(exp(x)+exp(-x))", "x=linspace(-1000,1000,2001)", "float64", 1, "overflow",
     "tanh(x)"),
    ("uTensor #175", "log(exp(x))", "x=linspace(-10,1000,1011)", "float64", 1, "overflow", "x"),
    ("FluxML NNlib #68", "(exp(x)/sum(exp(x), dim=0)).sum()", "x=[-1047.0, -981.0, 1891.0]", "float64", 1,
     "overflow", "softmax(x, dim=0).sum()"),
    ("scae-pytorch #4", "log(sum(exp(x)))", "x=[1000.0, 1.0, 2.0]", "float64", 1, "overflow", "logsumexp(x, dim=0)"),
    ("tinygrad #15957 / rust #72486", "log(x + sqrt(x**2 + 1))", "x=linspace(-1e9,1,101)", "float64", 1,
     "cancellation", "asinh(x)"),
    ("jax-js #218 (float32)", "log(x + sqrt(x**2 + 1))", "x=linspace(-1e5,1,101)", "float32", 1,
     "cancellation", "asinh(x)"),
    ("tinygrad #12409 (x**1.5)", "x*sqrt(x)", "x=linspace(0,1,11)", "float64", 1, "zero_times_inf", "x ** 1.5"),
    ("tinygrad #12409", "sqrt(x)**3", "x=linspace(0,1,11)", "float64", 1, "zero_times_inf", "x ** 1.5"),
    ("pytorch #2421 (second order)", "sqrt(x)**3", "x=linspace(0,1,11)", "float64", 2, "zero_times_inf",
     "x ** 1.5"),
    ("tensorflow #5562", "sqrt(x)**2", "x=linspace(0,1,11)", "float64", 1, "zero_times_inf", "x ** 1.0"),
    ("jax #21723 (exact mode)", "sqrt(sum(x**2))**2", "x=[0.0, 0.0, 0.0]", "float64", 1, "zero_times_inf",
     "sum(x ** 2) ** 1.0"),
    ("mlx #3668", "maximum(sqrt(x*x + y*y), 1e-10)", "x=[0.0, 1.0]; y=[0.0, 2.0]", "float64", 1, "zero_times_inf",
     "maximum(where(x * x + y * y > 0, sqrt(where(x * x + y * y > 0, x * x + y * y, 1)), 0), 1e-10)"),
    ("stanli #144 (underflow into sqrt)", "sqrt(exp(x))", "x=linspace(-1000,0,11)", "float64", 1, "overflow", None),
    ("stanli #144, float32", "sqrt(exp(x))", "x=linspace(-200,0,11)", "float32", 1, "overflow", None),
]


@pytest.mark.parametrize("report, expr, var, dtype, order, kind, fix", CORPUS, ids=[c[0] + ": " + c[1] for c in CORPUS])
def test_cause_and_proven_rewrite(report: str, expr: str, var: str, dtype: str, order: int, kind: str | None,
                                  fix: str | None) -> None:
    var = var.split("; ")  # several variables: "x=...; y=..."
    result = gradcli.check(expr, var, dtype=dtype, order=order, seed=0)
    assert not result.ok, f"{report}: {expr} should be reported"
    if kind is not None:
        bugs = [c for c in result.causes if c.is_bug]
        assert bugs and bugs[0].kind == kind, [(c.kind, c.summary) for c in result.causes]
    assert result.fix == fix
    if fix is not None:
        after = gradcli.check(fix, var, dtype=dtype, order=order, seed=0)
        assert after.ok, str(after)
        proven = [r for r in result.rewrites if r.proven]
        assert proven and all(r.wrong_after == 0 for r in proven)


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 25


# Derivatives that are truly undefined or infinite somewhere: named, never reported as a bug.
UNDEFINED = [
    ("sqrt(x)", "x=linspace(0,2,41)"),
    ("log(x)", "x=[0.0, 1.0, 2.0]"),
    ("1/x", "x=[-1.0, 0.0, 1.0]"),
    ("rsqrt(x)", "x=[0.0, 1.0, 4.0]"),
    ("x**0.5", "x=[0.0, 1.0, 4.0]"),
    ("asin(x)", "x=[-1.0, 0.0, 1.0]"),
    ("acos(x)", "x=[-1.0, 0.5, 1.0]"),
    ("atanh(x)", "x=[-1.0, 0.0, 1.0]"),
    ("log(x)", "x=linspace(0,1,11)"),
    ("x**(1/3)", "x=[0.0, 1.0, 8.0]"),
    ("sqrt(x**2 + y**2)", "x=[0.0, 1.0, 3.0]"),
    ("acosh(x)", "x=[1.0, 2.0, 3.0]"),
    ("sqrt(1 - x**2)", "x=[-1.0, 0.0, 1.0]"),
    ("1/sqrt(x)", "x=[0.0, 1.0]"),
    ("log(x) - log(x)", "x=[0.0, 1.0]"),  # sympy simplifies it to 0; as written it is undefined at 0
    ("sqrt(sum(x**2, dim=1)).sum()", "x=[[0.0, 0.0], [1.0, 2.0]]"),  # jax #21723: the norm of a zero row
]


@pytest.mark.parametrize("expr, var", UNDEFINED)
def test_truly_undefined_is_not_a_bug(expr: str, var: str) -> None:
    extra = ["y=[0.0, 2.0, 4.0]"] if "y" in expr else []
    result = gradcli.check(expr, [var, *extra], seed=0)
    assert result.ok, str(result)
    assert all(not c.is_bug for c in result.causes)
    assert any(c.kind == "undefined" for c in result.causes), [(c.kind, c.summary) for c in result.causes]
    for cause in result.causes:  # sympy and mpmath both asked, and agreeing; or the program as written
        assert ("sympy (" in cause.summary and "agree" in cause.summary) or \
            "the function itself is undefined there, evaluated as written" in cause.summary, cause.summary
        witnessed = [e for e in cause.examples if "sympy" in e]
        assert all(e["sympy"] and e["mpmath"] for e in witnessed)


def test_safe_norm_is_offered_with_its_tradeoff() -> None:
    result = gradcli.check("sqrt(x**2 + y**2)", ["x=[0.0, 1.0, 3.0]", "y=[0.0, 2.0, 4.0]"], seed=0)
    cause = next(c for c in result.causes if c.kind == "undefined")
    assert cause.rewrite is not None and "subgradient" in cause.rewrite["tradeoff"]
    assert cause.rewrite["nonfinite_before"] == 2 and cause.rewrite["nonfinite_after"] == 0


def test_overflow_names_the_intermediate_and_where_it_starts() -> None:
    result = gradcli.check("log(1+exp(x))", ["x=linspace(-100,100,201)"], dtype="float32", seed=0)
    cause = result.causes[0]
    assert cause.source == "exp(x)" and cause.node == "ExpBackward0"
    assert cause.where["x"] == [89.0, 100.0]  # float32's exp overflows past 88.72
    assert [f["value"] for f in cause.factors] == ["0", "inf"]


def test_leaked_branch_shows_the_branch_and_points() -> None:
    result = gradcli.check("where(x > 0, sqrt(x), 0)", ["x=[-2.0, -1.0, 1.0]"], seed=0)
    cause = result.causes[0]
    assert cause.kind == "leaked_branch" and cause.source == "sqrt(x)" and cause.where == {"x": [-2.0, -1.0]}


def test_every_key_produced_is_documented() -> None:
    import json
    import re

    documented = set(re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)?", (ROOT / "docs" / "causes.md")
                                .read_text(encoding="utf-8"), flags=re.M))
    keys = {k for pair in documented for k in pair if k}
    result = gradcli.check("log(1+exp(x))", ["x=[0.0, 800.0]"], seed=0)
    document = json.loads(json.dumps(result.as_dict(), default=str))
    produced = {"causes", "rewrites", "fix", "autograd_nonfinite"}
    for cause in document["causes"]:
        produced |= set(cause) | {k for f in cause["factors"] for k in f} | set(cause["rewrite"] or {})
    for rewrite in document["rewrites"]:
        produced |= set(rewrite)
    assert produced <= keys, produced - keys


def test_a_rewrite_that_does_not_fix_the_check_is_never_shown_as_a_fix() -> None:
    """log(exp(x) - 1) (the inverse of softplus) overflows past 709.78; expm1 matches, but
    log(expm1(x)) overflows the same way, so the check fails after it too: no known rewrite."""
    result = gradcli.check("log(exp(x) - 1)", ["x=linspace(1,1000,1000)"], seed=0)
    assert [c.kind for c in result.causes] == ["overflow"]
    assert [(r.rule, r.proven, r.wrong_after) for r in result.rewrites] == [("expm1", False, 291)]
    assert result.fix is None and result.causes[0].rewrite is None
    from gradcli import words

    assert "no known rewrite fixes it" in "\n".join(words.cause_lines(result.causes[0]))
