"""Errors: the rendered paragraph, the deep-stack runner, and a fuzz that nothing but a
GradcliError ever escapes the parser, the --var reader or the two interpreters."""

from __future__ import annotations

import sys
import threading
import warnings

import numpy as np
import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradcli._deep import run_deep
from gradcli.interpret.to_sympy import to_sympy
from gradcli.interpret.to_torch import build
from gradcli.errors import GradcliError, LimitError, ParseError, Span
from gradcli.language.ops import OPS
from gradcli.language.parser import parse
from gradcli.language.library import default_library
from gradcli.interpret.variables import parse_var


# -- render -------------------------------------------------------------------------------------
def test_render_is_one_paragraph_with_caret_and_hint():
    err = ParseError("something is wrong", source="x + y * z", span=Span(1, 4, 1, 9), hint="try this")
    assert err.render() == (
        "error: something is wrong\n"
        "  in expression, column 5:\n"
        "    x + y * z\n"
        "        ^~~~~\n"
        "hint: try this"
    )
    assert str(err) == err.render()


def test_render_without_a_position_is_the_message_and_hint():
    assert GradcliError("no position", hint="h").render() == "error: no position\nhint: h"
    assert GradcliError("bare").render() == "error: bare"


def test_at_attaches_the_source_once():
    err = LimitError("too big", span=Span(2, 0, 2, 1))
    assert err.at("a\nb", "--var x") is err
    err.at("other text")
    assert err.source == "a\nb" and err.what == "--var x"
    assert "in --var x, line 2, column 1:\n    b\n    ^" in err.render()


def test_a_span_over_several_lines_is_underlined_to_the_end_of_its_first_line():
    err = ParseError("m", source="abc + (\n  d)", span=Span(1, 4, 2, 4))
    assert err.render().splitlines()[2:4] == ["    abc + (", "        ^~~"]


def test_a_span_past_the_end_still_draws_one_caret():
    err = ParseError("m", source="x +", span=Span(1, 3, 1, 4))
    assert err.render().splitlines()[2:4] == ["    x +", "       ^"]


def test_control_characters_are_drawn_as_spaces_so_the_caret_stays_aligned():
    err = ParseError("m", source="a\x00\tb", span=Span(1, 3, 1, 4))
    assert err.render().splitlines()[2:4] == ["    a  b", "       ^"]


# -- the deep-stack runner ---------------------------------------------------------------------
def _depth(k: int) -> int:
    return 0 if k == 0 else 1 + _depth(k - 1)


def test_run_deep_allows_deep_recursion_and_restores_the_limit():
    before = sys.getrecursionlimit()
    assert run_deep(_depth, 50_000) == 50_000
    assert sys.getrecursionlimit() == before


def test_run_deep_reraises_in_the_caller():
    with pytest.raises(KeyError, match="boom"):
        run_deep(lambda: {}["boom"])
    with pytest.raises(LimitError):
        parse("(" * 3000 + "x" + ")" * 3000)


def test_run_deep_nests_without_new_threads():
    names = run_deep(lambda: (threading.current_thread().name, run_deep(lambda: threading.current_thread().name)))
    assert names == ("gradcli-deep", "gradcli-deep")


def test_run_deep_from_several_threads_at_once():
    results: list[int] = []

    def work() -> None:
        results.append(run_deep(_depth, 20_000))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [20_000] * 4


# -- fuzz: only GradcliError or a result --------------------------------------------------------
LIBRARY = default_library()
TOKENS = [
    "x", "y", "h", "1", "2", "0", "0.5", "1e-3", "-1", "pi", "e", "é", "+", "-", "*", "/", "**", "@", "(", ")",
    ",", ";", "\n", "=", ">", "<=", ".", "dim=", "keepdim=", "True", "False", "[", "]", "min=", "max=",
    "beta=", " ", "'", "\t", "\\", "#", ":", "__", "lambda", "if", "9**9**9", "1e308", "\x00", "[0]",
    *OPS, *LIBRARY.functions,
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14))
def test_fuzz_token_soup_only_raises_gradcli_errors(tokens):
    _interpret_everywhere("".join(tokens))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_fuzz_any_text_only_raises_gradcli_errors(text):
    _interpret_everywhere(text)


def _interpret_everywhere(text: str) -> None:
    try:
        program = parse(text, LIBRARY.functions)
    except GradcliError as err:
        assert err.render().startswith("error: ")
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for shape in [(), (3,), (2, 3)]:
            leaves = {
                v: (0.1 + torch.rand(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))).requires_grad_()
                for v in program.variables
            }
            try:
                build(program, leaves, library=LIBRARY)
            except GradcliError:
                pass
            if shape == ():
                symbols = {v: sympy.Symbol(v) for v in program.variables}
            else:
                size = int(np.prod(shape))
                symbols = {
                    v: np.array([sympy.Symbol(f"{v}_{i}") for i in range(size)], dtype=object).reshape(shape)
                    for v in program.variables
                }
            try:
                to_sympy(program, symbols, library=LIBRARY)
            except GradcliError:
                pass


VAR_TOKENS = ["x", "=", "1", "2.5", "-", "[", "]", ",", "(", ")", "randn", "rand", "ones", "zeros", "full", "arange",
              "linspace", "uniform", "pi", "e", "inf", "nan", "1e400", "0", "1e9", " ", "'", "__import__", ".", "*"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(VAR_TOKENS), min_size=1, max_size=12))
def test_fuzz_var_specs_only_raise_gradcli_errors(tokens):
    try:
        spec = parse_var("x=" + "".join(tokens))
    except GradcliError as err:
        assert err.render().startswith("error: ")
        return
    assert spec.numel <= 50_000_000


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30))
def test_fuzz_var_any_text(text):
    try:
        parse_var(text)
    except GradcliError:
        pass
