"""The sympy translator: exact formulas, both modes, and the same refusals as the torch builder."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
import torch

from gradcli.interpret.to_sympy import symbolic_number, to_sympy
from gradcli.interpret.to_torch import build
from gradcli.errors import ArgumentError, LimitError, ShapeError, UnknownNameError
from gradcli.pipeline import parse  # the parser with the expression library, as gradcli.parse

x, y = sympy.symbols("x y")


def sym(text: str, **values):
    return to_sympy(parse(text), values or {"x": x, "y": y})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x * 0.1", x / 10),  # literals are exact: 0.1 is 1/10 as written
        ("x ** 2 + 1e-3", x**2 + sympy.Rational(1, 1000)),
        ("2.0 * x", 2 * x),
        ("pi * x + e", sympy.pi * x + sympy.E),
        ("-x + +y", y - x),
        ("h = x * x; h = h + x; h / y", (x**2 + x) / y),
        ("sigmoid(x)", 1 / (1 + sympy.exp(-x))),
        ("x.pow(3).exp()", sympy.exp(x**3)),
        ("square(x) - reciprocal(y)", x**2 - 1 / y),
        ("where(x > 0, x, 0.1 * x)", sympy.Piecewise((x, x > 0), (x / 10, True))),
        ("where(x <= y, 1, 2)", sympy.Piecewise((1, x <= y), (2, True))),
        ("maximum(x, y)", sympy.Piecewise((x, x > y), (y, True))),
        ("clamp(x, min=0)", sympy.Piecewise((0, x < 0), (x, True))),
        ("clamp(x, max=1)", sympy.Piecewise((1, x > 1), (x, True))),
        ("swish(x, beta=1.5)", x / (1 + sympy.exp(-sympy.Rational(3, 2) * x))),
        ("mish(x)", x * sympy.tanh(sympy.Piecewise((x, x > 20), (sympy.log(1 + sympy.exp(x)), True)))),
        ("sum(x)", x),  # reductions of a scalar are the scalar
        ("x.mean(dim=0)", x),
        ("softmax(x, 0)", sympy.Integer(1)),
        ("log_softmax(x, -1)", sympy.Integer(0)),
        ("exp(2) * x", sympy.exp(2) * x),
    ],
)
def test_exact_formulas(text, expected):
    assert sympy.simplify(sym(text) - expected) == 0


def test_symbolic_numbers_are_exact():
    assert symbolic_number(0.1) == sympy.Rational(1, 10)
    assert symbolic_number(3) == sympy.Integer(3)
    assert symbolic_number(2.0) == sympy.Integer(2) and symbolic_number(2.0).is_Integer
    assert symbolic_number(1e-3) == sympy.Rational(1, 1000)
    assert symbolic_number(True) is sympy.true


def test_arrays_of_symbols_give_reductions_and_matmul_their_exact_meaning():
    a = np.array(sympy.symbols("a0:6"), dtype=object).reshape(2, 3)
    v = np.array(sympy.symbols("v0:3"), dtype=object)
    total = to_sympy(parse("A.sum()"), {"A": a})
    assert total == sum(a.flat)
    rows = to_sympy(parse("sum(A, dim=1, keepdim=True)"), {"A": a})
    assert rows.shape == (2, 1) and rows[1, 0] == a[1, 0] + a[1, 1] + a[1, 2]
    mean = to_sympy(parse("mean(A, dim=0)"), {"A": a})
    assert mean.shape == (3,) and sympy.simplify(mean[2] - (a[0, 2] + a[1, 2]) / 2) == 0
    product = to_sympy(parse("A @ v"), {"A": a, "v": v})
    assert product.shape == (2,) and sympy.expand(product[0] - (a[0, 0] * v[0] + a[0, 1] * v[1] + a[0, 2] * v[2])) == 0
    dot = to_sympy(parse("v @ v"), {"v": v})
    assert sympy.expand(dot - (v[0] ** 2 + v[1] ** 2 + v[2] ** 2)) == 0
    soft = to_sympy(parse("softmax(v, 0)"), {"v": v})
    assert sympy.simplify(soft[1] - sympy.exp(v[1]) / sum(sympy.exp(t) for t in v)) == 0
    lse = to_sympy(parse("logsumexp(A, dim=(0, 1))"), {"A": a})
    assert sympy.simplify(lse - sympy.log(sum(sympy.exp(t) for t in a.flat))) == 0
    prod = to_sympy(parse("A.prod(dim=1)"), {"A": a})
    assert prod[0] == a[0, 0] * a[0, 1] * a[0, 2]
    broadcast = to_sympy(parse("A * v + 1"), {"A": a, "v": v})
    assert broadcast.shape == (2, 3) and broadcast[1, 2] == a[1, 2] * v[2] + 1


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("9**9**9**9", LimitError, "the constant 9 ** 387420489 is larger than 1e+300"),
        ("x * 9**9**9", LimitError, "is larger than 1e+300"),
        ("pow(9, 9**9) * x", LimitError, "is larger than 1e+300"),
        ("x + pi**pi**pi**pi", LimitError, "is larger than 1e+300"),
        ("x + e**1000", LimitError, "is larger than 1e+300"),
        ("x + 1e300 * 1e300", LimitError, "is larger than 1e+300"),
        ("x ** (9**9)", LimitError, "beyond ±10,000 for the symbolic formula"),
        ("x.pow(100000)", LimitError, "beyond ±10,000 for the symbolic formula"),
        ("x ** -1e300", LimitError, "the exponent -1e+300 is beyond"),
        ("x + 1/0", ArgumentError, "division by zero in a constant"),
        ("x + 0**-1", ArgumentError, "division by zero in a constant"),
        ("x + (-8)**(1/3)", ArgumentError, "not a real number"),
        ("x @ x", ShapeError, "cannot compute '@' symbolically"),
        ("sum(x, dim=5)", ShapeError, "dimension 5 is out of range for a 0-d tensor"),
    ],
)
def test_refuses_what_would_hang_or_mean_nothing(text, kind, message):
    with pytest.raises(kind) as info:
        sym(text)
    assert message in info.value.message
    assert info.value.span is not None


@pytest.mark.parametrize(
    "text",
    ["9**9**9**9", "x * 9**9**9", "x + 1/0", "x + 0**-1", "x + (-8)**(1/3)", "x + 1e300 * 1e300",
     "x + pi**pi**pi**pi", "x @ x", "sum(x, dim=5)"],
)
def test_both_interpreters_refuse_the_same_inputs(text):
    with pytest.raises(Exception) as sympy_error:
        sym(text)
    leaves = {"x": torch.tensor(0.5, dtype=torch.float64, requires_grad=True), "y": torch.tensor(1.0, dtype=torch.float64)}
    program = parse(text)
    with pytest.raises(Exception) as torch_error:
        build(program, {k: v for k, v in leaves.items() if k in program.variables})
    assert type(sympy_error.value) is type(torch_error.value)


def test_dims_out_of_range_and_repeated_as_torch():
    a = np.array(sympy.symbols("a0:6"), dtype=object).reshape(2, 3)
    for text, message in [("sum(A, dim=2)", "dimension 2 is out of range for a 2-d tensor"),
                          ("sum(A, dim=-3)", "dimension -3 is out of range"),
                          ("sum(A, dim=(0, -2))", "names a dimension more than once"),
                          ("softmax(A, dim=2)", "out of range")]:
        with pytest.raises(ShapeError) as info:
            to_sympy(parse(text), {"A": a})
        assert message in info.value.message, text


def test_shape_mismatch_is_a_shape_error():
    a = np.array(sympy.symbols("a0:3"), dtype=object)
    b = np.array(sympy.symbols("b0:2"), dtype=object)
    with pytest.raises(ShapeError):
        to_sympy(parse("A + B"), {"A": a, "B": b})
    with pytest.raises(ShapeError):
        to_sympy(parse("A @ B"), {"A": a, "B": b})


def test_missing_value_is_named():
    with pytest.raises(UnknownNameError) as info:
        to_sympy(parse("x + z"), {"x": x})
    assert info.value.message == "no value for the variable 'z'"


def test_a_long_sum_translates_past_pythons_recursion_limit():
    # 3,000 levels: beyond the default recursion limit (1,000), so the deep-stack runner is
    # needed; more costs sympy ~1 ms a term (it deduces facts about each new Integer).
    assert to_sympy(parse("+".join(["x"] * 3_000)), {"x": x}) == 3_000 * x


def test_clamp_with_min_above_max_is_max_as_in_torch():
    expr = sym("clamp(x, 0.8, -0.5)")
    for value in [-2, 0, 0.3, 0.9, 3]:
        assert expr.subs(x, value) == sympy.Rational(-1, 2)
        assert torch.clamp(torch.tensor(float(value)), 0.8, -0.5).item() == -0.5
