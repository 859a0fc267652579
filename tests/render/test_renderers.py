"""Each renderer's output, pinned for a few fixed results at width 100 (the plain text a pipe gets).

Results are built directly as plain data (or from a run whose values are all fixed), handed
to `gradcli.render.formats.render` and printed by `gradcli.cli.output.write`, the one place
that prints; the text is compared line by line (trailing blanks, which rich pads tables
with, are dropped).
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
import torch
from rich.console import Console

from gradcli import words
from gradcli.cli.output import write
from gradcli.demos.runner import Code, Heading, Prose, Shell, Verdict
from gradcli.render.contract import Format
from gradcli.render.formats import FORMATS, format_named, render
from gradcli.exact.compare import Comparison
from gradcli.verify.causes.cause import Cause
from gradcli.verify.function.check import FunctionResult
from gradcli.verify.finite_differences.gradchecks import GradcheckVerdict
from gradcli.verify.finite_differences.jacobian import InputCheck
from gradcli.verify.expression.result import CheckResult, LibraryCheck
from gradcli.verify.function.inputs import Inputs
from gradcli.words import problem_sentences

WIDTH = 100


def text(result, **options) -> list[str]:
    out = StringIO()
    console = Console(file=out, width=WIDTH, no_color=True, highlight=False, soft_wrap=False, emoji=False)
    write(render(result, "text", width=WIDTH, **options), console)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def softplus_wrong() -> CheckResult:
    """log(1+exp(x)) as check finds it on linspace(-800, 800, 1001): nan past x = 710."""
    c = Comparison("x", "autograd", points=1001, max_abs_err=float("nan"), max_rel_err=float("nan"),
               worst_at={"x": 800.0, "autograd": float("nan"), "exact": 1.0}, wrong=90, disagreeing=90,
               arbitrated=90, wrong_ranges=[{"where": {"x": (710.4, 800.0)}, "got": "nan", "exact": "1", "points": 90}])
    return CheckResult("log(1+exp(x))", 1, "float64", "elementwise", "x=linspace(-800,800,1001) (--var)",
                   {"rtol": 1e-7, "atol": 1e-10}, symbolic={"x": "exp(x)/(exp(x) + 1)"}, variables=[c],
                   gradcheck=GradcheckVerdict(True, False, None, 200), seed=3)


def relu_ok() -> CheckResult:
    """An order-2 result with a kink, points outside the domain, an arbitrated point and a note."""
    first = Comparison("x", "autograd", points=2, kinks=1, kink_examples=[{"x": 0.0, "autograd": 0.0}],
                   float64_formula_wrong=1)
    second = Comparison("x,x", "autograd", points=2, kinks=1, skipped_outside_domain=3)
    not_run = GradcheckVerdict(None, message="the values are at or next to a kink")
    return CheckResult("relu(x)", 2, "float64", "elementwise", "x=[-1.0, 0.0, 2.0] (--var)",
                   {"rtol": 1e-7, "atol": 1e-10}, symbolic={"x": "Heaviside(x)"}, symbolic_second={"x,x": "0"},
                   variables=[first], second=[second], gradcheck=not_run, gradgradcheck=not_run,
                   notes=["a note"], seed=1)


def swish_function() -> FunctionResult:
    inputs = Inputs(["x", "beta"], [torch.tensor([0.5, -1.0]), 1.0], [True, False], ["x"])
    return FunctionResult(
    "mine.py:Swish", 2, inputs, GradcheckVerdict(True, False, None, 2),
    GradcheckVerdict(False, False, "Jacobian mismatch for output 0 with respect to input 0", 2),
    first=[InputCheck("x", torch.eye(2), torch.eye(2), max_abs_err=1e-11)],
    causes=[Cause("saved_intermediate", "x", 2, {}, "the backward reuses a saved sigmoid")],
    )


CHECK_WRONG = [
    'check log(1+exp(x))   (float64, order 1, elementwise)',
    'points: x=linspace(-800,800,1001) (--var); seed 3',
    'd/dx = exp(x)/(exp(x) + 1)',
    '┏━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━┳━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━┓',
    '┃ derivative    ┃ points ┃ max abs err ┃ max rel err ┃ worst at ┃ got ┃ exact ┃ skipped ┃ notes    ┃',
    '┡━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━╇━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━┩',
    '│ d/dx autograd │  1,001 │ nan         │ nan         │ x=800    │ nan │ 1     │ 0       │ 90 WRONG │',
    '└───────────────┴────────┴─────────────┴─────────────┴──────────┴─────┴───────┴─────────┴──────────┘',
    'x: autograd gives nan for x from 710.4 to 800, exact 1 (90 points)',
    'gradcheck: passed (slow mode, 200 input elements)',
    'PROBLEM: autograd gives nan for x from 710.4 to 800 where the true d/dx is 1 (90 points)',
]

CHECK_ORDER_2 = [
    'check relu(x)   (float64, order 2, elementwise)',
    'points: x=[-1.0, 0.0, 2.0] (--var); seed 1',
    'd/dx = Heaviside(x)',
    'd2/dx dx = 0',
    '┏━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━┳━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━┓',
    '┃                   ┃        ┃ max abs  ┃ max rel  ┃          ┃     ┃       ┃           ┃          ┃',
    '┃ derivative        ┃ points ┃ err      ┃ err      ┃ worst at ┃ got ┃ exact ┃ skipped   ┃ notes    ┃',
    '┡━━━━━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━╇━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━┩',
    '│ d/dx autograd     │      2 │ 0        │ 0        │          │     │       │ 1 kink    │ 1 where  │',
    '│                   │        │          │          │          │     │       │           │ only the │',
    '│                   │        │          │          │          │     │       │           │ float64  │',
    '│                   │        │          │          │          │     │       │           │ formula  │',
    '│                   │        │          │          │          │     │       │           │ was off  │',
    '│ d2/dx dx autograd │      2 │ 0        │ 0        │          │     │       │ 3 outside │          │',
    '│                   │        │          │          │          │     │       │ domain, 1 │          │',
    '│                   │        │          │          │          │     │       │ kink      │          │',
    '└───────────────────┴────────┴──────────┴──────────┴──────────┴─────┴───────┴───────────┴──────────┘',
    'kink of d/dx at x=0: autograd gives 0 (not compared)',
    'gradcheck: not run (the values are at or next to a kink)',
    'gradgradcheck: not run (the values are at or next to a kink)',
    'note: a note',
    'OK: autograd agrees with the exact derivative (2 values, max rel err 0); second derivatives agree',
]

LIBRARY = [
    'gradcli check --all (order 2, seed 1)',
    '┏━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓',
    '┃ expression    ┃ points ┃ max rel err ┃ gradcheck ┃ verdict                                       ┃',
    '┡━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩',
    '│ relu(x)       │ 2      │ 0           │ not run   │ ok                                            │',
    '│ log(1+exp(x)) │ 1,001  │ nan         │ passed    │ PROBLEM: autograd gives nan for x from 710.4  │',
    '│               │        │             │           │ to 800 where the true d/dx is 1 (90 points)   │',
    '└───────────────┴────────┴─────────────┴───────────┴───────────────────────────────────────────────┘',
    'PROBLEM: 1 of 2 library entries failed',
]

FUNCTION = [
    'check-function mine.py:Swish   (order 2, seed 0)',
    'x = [0.5, -1.0] (default)',
    'beta = 1.0',
    'first derivatives: your backward vs finite differences [x]: ok (max abs err 1e-11)',
    'gradcheck: passed (slow mode, 2 input elements)',
    'gradgradcheck: FAILED (slow mode): Jacobian mismatch for output 0 with respect to input 0',
    'likely cause: the backward reuses a saved sigmoid',
    'PROBLEM: the backward reuses a saved sigmoid',
]

TRACE = [
    'trace  x.pow(2).sum()',
    'output: shape [] float64  value 5.0',
    '',
    'Leaves',
    '  x  shape [2] float64 requires_grad=True  from [1.0, 2.0]  value [1.0, 2.0]',
    '',
    'Graph',
    'output grad_fn (3 nodes)',
    '└── n0 SumBackward0  ‹x.pow(2).sum()›',
    '        _saved_self_sym_sizes: [2]',
    '    ↓ n1 PowBackward0  ‹x.pow(2)›',
    '        _saved_exponent: 2',
    '        _saved_self: the leaf x [2]',
    '    ↓ n2 torch::autograd::AccumulateGrad  variable x',
    '',
    'Passes',
    '  pass 1: torch.autograd.backward(retain_graph=False, create_graph=False)',
    '    .grad of x: [2.0, 4.0]',
    '',
    'Gradients',
    '  x.grad: [2.0, 4.0]',
]

PLOT = [
    'x=linspace(-1,1,5) (--var): 5 points, float64',
    'd/dx exact: Piecewise((1, x > 0), (0, True))',
    'd/dx: autograd agrees with the exact derivative at 4 points (max abs err 0)',
    'kinks at x = 0',
]

DEMO_BLOCKS = [
    '1. Title ───────────────────────────────────────────────────────────────────────────────────────────',
    'word word word word word word word word word word word word word word word word word word word word',
    'word word word word word word word word word word',
    '    x = 1',
    '    x',
    '    #> 1',
    '    ✗ it failed',
    "    $ gradcli check 'x*x'",
]


# --- text ---------------------------------------------------------------------------------


def test_a_wrong_check_is_a_table_the_wrong_range_and_the_problem():
    assert text(softplus_wrong()) == CHECK_WRONG


def test_str_of_a_check_is_the_console_text():
    # The public API's result prints what the command prints (plain): one description.
    from gradcli.api import Check

    result = softplus_wrong()
    assert str(Check(**vars(result))).splitlines() == CHECK_WRONG
    # The verdict and the problem sentence are one text, wherever they are shown.
    assert CHECK_WRONG[-1] == result.verdict()
    assert result.as_dict()["problems"] == [CHECK_WRONG[-1].removeprefix("PROBLEM: ")]


def test_an_order_2_check_labels_second_derivatives_and_lists_what_was_set_aside():
    from gradcli.api import Check

    assert text(relu_ok()) == CHECK_ORDER_2
    assert str(Check(**vars(relu_ok()))).splitlines() == CHECK_ORDER_2


def test_check_all_is_one_row_per_entry_and_a_count():
    assert text(LibraryCheck([relu_ok(), softplus_wrong()])) == LIBRARY


def test_check_function_console_and_str_are_one_text():
    # The public API's result prints what the command prints (plain), "(default)" included.
    from gradcli.api import FunctionCheck

    assert text(swish_function()) == FUNCTION
    result = swish_function()
    assert str(FunctionCheck(**vars(result))).splitlines() == FUNCTION


def test_trace_of_fixed_values_prints_no_seed():
    from gradcli.tracing.trace import trace

    assert text(trace("x.pow(2).sum()", ["x=[1.0, 2.0]"])) == TRACE
    assert not any("seed" in line for line in TRACE)


def test_plot_report():
    from gradcli.plot.data import plot_data

    assert text(plot_data("relu(x)", ["x=linspace(-1,1,5)"])) == PLOT


def test_demo_blocks():
    lines = []
    for block in (Heading("1. Title"), Prose("word " * 30), Code("x = 1\nx", "1"), Verdict(False, "it failed"),
                  Shell(("check", "x*x"))):
        lines += text(block)
    assert lines == DEMO_BLOCKS


def test_listing_text_is_never_read_as_markup():
    # rich markup used to swallow "[min, max]" from clamp's line of `gradcli list`.
    from gradcli.render.listing import Listing

    listing = Listing([], [{"signature": "clamp(input, min=None, max=None)", "doc": "limit to [min, max]",
                            "method": True}])
    assert any("limit to [min, max]" in line for line in text(listing))


# --- json and the contract ----------------------------------------------------------------


def test_json_of_a_check_is_its_document():
    result = softplus_wrong()
    document = json.loads(render(result, "json"))
    assert document["problems"] == problem_sentences(result.problems)
    assert document["variables"][0]["max_abs_err"] == "nan"  # JSON has no NaN: the edge writes a string
    assert list(document)[:6] == ["expression", "ok", "order", "symbolic", "variables", "gradcheck"]
    suite = json.loads(render(LibraryCheck([relu_ok(), softplus_wrong()]), "json"))
    assert suite["ok"] is False and [r["ok"] for r in suite["results"]] == [True, False]


def test_trace_json_seed_is_null_without_random_values_and_set_with_them():
    from gradcli.tracing.trace import trace

    assert json.loads(render(trace("x.pow(2).sum()", ["x=[1.0, 2.0]"]), "json"))["seed"] is None
    assert json.loads(render(trace("x.sum()", ["x=randn(3)"], seed=5), "json"))["seed"] == 5
    assert json.loads(render(trace("x*1", ["x=[1.0]"], grad_output="randn(1)", seed=6), "json"))["seed"] == 6
    assert trace("x.sum()", ["x=ones(2)"], grad_output=None).seed is None


def test_every_format_is_a_format_and_an_unknown_result_is_refused():
    for name in FORMATS:
        assert isinstance(format_named(name), Format)
    with pytest.raises(TypeError, match="the text format has no renderer for dict"):
        render({}, "text")
    with pytest.raises(TypeError, match="the dot format has no renderer for CheckResult"):
        render(relu_ok(), "dot")


def test_a_new_result_kind_is_one_method():
    class Shout(Format):
        name = "shout"

        def _render_CheckResult(self, result):
            return result.expression.upper()

    assert Shout().render(relu_ok()) == "RELU(X)"


def test_derivative_labels():
    assert words.derivative_label("x") == "d/dx"
    assert words.derivative_label("x,y") == "d2/dx dy"
    assert words.derivative_label(("x", "x")) == "d2/dx dx"
    assert words.derivative_label(("x", "x"), superscript=True) == "d²/dx²"
    assert words.derivative_label(["x"], superscript=True) == "d/dx"
