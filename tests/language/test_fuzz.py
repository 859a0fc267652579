"""Fuzzing: random text into the expression parser, the torch builder, the sympy translator
and the --var parser. Whatever the text, the outcome is a result or a GradcliError (exit 2
with a message on the command line), never another exception.

Two kinds of text: arbitrary unicode, which mostly exercises Python's tokenizer and the
first refusals, and "token soup" (names, operations, numbers, operators and punctuation of
the language, with a few foreign ones), which reaches the parser's allow-list, argument
binding, shapes and constants. CI runs 1,260 examples; GRADCLI_SLOW=1 pytest -m slow runs
15,000 expressions (some of 200 tokens), 12,000 --var options and 2,000 trace command lines.
"""

from __future__ import annotations

import math
import string

import numpy as np
import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gradcli.interpret.to_sympy import to_sympy
from gradcli.interpret.to_torch import build
from gradcli.cli import app
from gradcli.errors import GradcliError
from gradcli.language.ops import OPS
from gradcli.language.parser import parse
from gradcli.language.library import default_library
from gradcli.interpret.constructors import CONSTRUCTORS
from gradcli.interpret.variables import make_leaves, parse_var
from strategies import examples

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
LIBRARY = default_library()

EXPRESSION_TOKENS = (
    *OPS, *LIBRARY.functions, "x", "y", "h", "pi", "e", "x", "x", "y",
    "0", "1", "2", "0.5", "-1", "1e-3", "1e308", "1e999", "9**9**9", "10**400", "2**0.5", "(-8)**(1/3)",
    "+", "-", "*", "/", "**", "@", "//", "%", "^", "<", ">", "<=", ">=", "==", "!=", " and ", " or ", "not ",
    "(", ")", "(", ")", "[", "]", "{", "}", ",", ",", ";", ":", ".", "=", "\n", "\t", " ", "  ",
    "dim=", "dim=0", "dim=-1", "dim=(0,1)", "keepdim=True", "keepdim=", "beta=", "min=", "max=",
    "True", "False", "None", "lambda ", "import ", "if ", "else ", "for ", " in ", "yield ", "await ",
    "'s'", '"s"', "f'{x}'", "__import__", "__class__", ".__dict__", "x[0]", "...", "*x", "**x", ":=",
    "π", "\x00", "\r", "\u2028", "#", "\\",
)
SPEC_TOKENS = (
    *CONSTRUCTORS, "(", ")", "[", "]", ",", ",", " ", "-", "+", "0", "1", "2", "3", "0.5", "1e9", "1e400",
    "-1", "inf", "nan", "pi", "e", "100000", "True", "None", "'a'", "x", "__import__", ".", "=", "*", "**",
    "lambda", "\x00", "\n", "#", ";",
)


def soup(tokens: tuple[str, ...], max_size: int = 30) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(tokens), max_size=max_size).map("".join)


texts = st.one_of(st.text(max_size=60), st.text(string.printable, max_size=60))
expressions = st.one_of(soup(EXPRESSION_TOKENS), soup(EXPRESSION_TOKENS, 80), texts)
specs = st.one_of(soup(SPEC_TOKENS), texts)
#: Whole --var options: a name (usually x) and a spec.
options = st.tuples(st.one_of(st.just("x"), st.text(max_size=3)), specs).map(lambda p: f"{p[0] or 'x'}={p[1]}")

#: Values for the variables of a parsed program, by the variable's index: scalars and shapes.
VALUES = ("0.5", "[0.5, -1.5, 2.0]", "[[1.0, 2.0], [3.0, -4.0]]", "-0.75", "[1.0, 2.0]")


def symbols_like(name: str, shape: tuple[int, ...]) -> object:
    """A sympy Symbol for a 0-d variable, else a numpy object array of one symbol each."""
    if not shape:
        return sympy.Symbol(name, real=True)
    flat = [sympy.Symbol(f"{name}_{i}", real=True) for i in range(math.prod(shape))]
    return np.array(flat, dtype=object).reshape(shape)


def parse_build_translate(text: str) -> None:
    """parse, then the torch builder and the sympy translator: results or GradcliErrors only."""
    try:
        program = parse(text, LIBRARY.functions)
    except GradcliError as err:
        assert err.render().startswith("error: ")
        return
    try:
        leaves = make_leaves(program.variables, (), seed=0, default=lambda name, i: VALUES[i % len(VALUES)])
    except GradcliError:
        return
    for interpret in (
        lambda: build(program, leaves.tensors, library=LIBRARY),
        lambda: to_sympy(program, {k: symbols_like(k, tuple(v.shape)) for k, v in leaves.tensors.items()},
                         library=LIBRARY),
    ):
        try:
            interpret()
        except GradcliError as err:
            assert err.render().startswith("error: ")


def parse_and_make(text: str) -> None:
    """parse_var, and the tensor when it is small: results or GradcliErrors only."""
    try:
        spec = parse_var(text)
    except GradcliError as err:
        assert err.render().startswith("error: ")
        return
    assert all(isinstance(d, int) and d >= 0 for d in spec.shape)
    if spec.numel <= 100_000:
        try:  # a spec that parses may still be no tensor (`none`, for check-function's None)
            leaves = make_leaves([spec.name], [text], seed=0)
        except GradcliError as err:
            assert err.render().startswith("error: ")
            return
        assert tuple(leaves.tensors[spec.name].shape) == spec.shape


@settings(max_examples=500, **SETTINGS)
@given(expressions)
def test_expression_text_gives_a_result_or_a_gradcli_error(text: str):
    parse_build_translate(text)


@settings(max_examples=500, **SETTINGS)
@given(options)
def test_var_spec_gives_a_result_or_a_gradcli_error(option: str):
    parse_and_make(option)


@settings(max_examples=200, **SETTINGS)
@given(soup(SPEC_TOKENS))
def test_constructor_specs_give_a_result_or_a_gradcli_error(spec: str):
    parse_and_make(f"x={spec}")


RUNNER = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1"})


def run_trace(text: str, values: list[str]) -> None:
    options = [arg for i, v in enumerate(values) for arg in ("--var", f"{'xy'[i]}={v}")]
    result = RUNNER.invoke(app, ["trace", "--seed", "0", *options, "--", text])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1, 2)
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr, result.stderr
    if result.exit_code == 2:
        assert result.stderr.startswith(("error: ", "Usage: ")), result.stderr


@settings(max_examples=60, **SETTINGS)
@given(expressions, st.lists(specs, max_size=2))
def test_trace_command_exits_0_1_or_2_with_a_message(text: str, values: list[str]):
    run_trace(text, values)


# -- slow mode: GRADCLI_SLOW=1 pytest -m slow tests/language/test_fuzz.py ---------------------------------
@pytest.mark.slow
@settings(max_examples=examples(1500, 15_000), **SETTINGS)
@given(st.one_of(expressions, soup(EXPRESSION_TOKENS, 200)))
def test_slow_expression_text_gives_a_result_or_a_gradcli_error(text: str):
    parse_build_translate(text)


@pytest.mark.slow
@settings(max_examples=examples(1000, 12_000), **SETTINGS)
@given(options)
def test_slow_var_spec_gives_a_result_or_a_gradcli_error(option: str):
    parse_and_make(option)


@pytest.mark.slow
@settings(max_examples=examples(150, 2_000), **SETTINGS)
@given(expressions, st.lists(specs, max_size=2))
def test_slow_trace_command_exits_0_1_or_2_with_a_message(text: str, values: list[str]):
    run_trace(text, values)
