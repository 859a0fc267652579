"""language/rewrites.py: each rule rewrites what it names, leaves the rest alone, and its
output parses back to the same AST (language/source.py)."""

from __future__ import annotations

import pytest

from gradcli.language.parser import parse
from gradcli.language.rewrites import RULES, RULES_BY_NAME, matching, rewrite_program
from gradcli.language.source import program_source

CASES = {
    "softplus": ("log(1 + exp(2*x))", "softplus(2 * x)"),
    "logsigmoid": ("log(sigmoid(x))", "logsigmoid(x)"),
    "sigmoid": ("exp(x) / (1 + exp(x))", "sigmoid(x)"),
    "tanh": ("(exp(x) - exp(-x)) / (exp(x) + exp(-x))", "tanh(x)"),
    "logsumexp": ("log(sum(exp(x), dim=1))", "logsumexp(x, dim=1)"),
    "softmax": ("exp(x) / sum(exp(x), dim=0, keepdim=True)", "softmax(x, dim=0)"),
    "log_softmax": ("log(softmax(x, dim=0))", "log_softmax(x, dim=0)"),
    "log1p": ("log(x + 1)", "log1p(x)"),
    "expm1": ("x.exp() - 1", "expm1(x)"),
    "log_exp": ("log(exp(x))", "x"),
    "asinh": ("log(x + sqrt(x**2 + 1))", "asinh(x)"),
    "sqrt_power": ("sqrt(x)**3", "x ** 1.5"),
    "abs": ("sqrt(x*x)", "abs(x)"),
    "double_where": ("where(x > 0, sqrt(x), 0)", "where(x > 0, sqrt(where(x > 0, x, 1.0)), 0)"),
    "safe_norm": ("sqrt(sum(x**2))", "where(sum(x ** 2) > 0, sqrt(where(sum(x ** 2) > 0, sum(x ** 2), 1)), 0)"),
}


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == {rule.name for rule in RULES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_rewrites_its_pattern(name: str) -> None:
    before, after = CASES[name]
    rewritten = rewrite_program(parse(before), RULES_BY_NAME[name])
    assert program_source(rewritten) == after
    assert parse(after) == rewritten  # the text shown is the AST checked


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_leaves_other_expressions_alone(name: str) -> None:
    program = parse("x * sigmoid(x) + log(2 + x**2)")
    assert rewrite_program(program, RULES_BY_NAME[name]) == program


def test_double_where_guards_the_else_branch_with_the_negated_condition() -> None:
    program = rewrite_program(parse("where(x < 0, 0, log(x))"), RULES_BY_NAME["double_where"])
    assert program_source(program) == "where(x < 0, 0, log(where(x >= 0, x, 1.0)))"


def test_matching_lists_rules_in_table_order() -> None:
    assert [r.name for r in matching(parse("log(1 + exp(x)) + log(1 + x)"))] == ["softplus", "log1p"]


@pytest.mark.parametrize("text", ["log(1 + exp(x))", "-x ** 2", "(-x) ** 2", "x - (y - z)", "2 ** -x",
                                  "x.pow(2).sum()", "sum(x, dim=(0, 1))", "-(x + 1)", "x / (y * z)"])
def test_source_round_trips(text: str) -> None:
    assert parse(program_source(parse(text))) == parse(text)
