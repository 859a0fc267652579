"""Every row of the operations table, in both interpreters: torch's value equals sympy's.

Elementwise rows are read on scalars (one sympy Symbol, evaluated point by point) and built
in torch on a vector of the same points; the other kinds (reductions, softmax, matmul) use
one sympy symbol per element. Points are inside each row's `domain` and off its `kinks`.
Tolerance: float64, |torch - sympy| <= 1e-12 + 1e-11 * |sympy|.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy
import torch

from gradcli.interpret.to_sympy import to_sympy
from gradcli.interpret.to_torch import build
from gradcli.language.ops import OPS, OPS_LIST
from gradcli.language.parser import parse

RTOL, ATOL = 1e-11, 1e-12


def sample_points(low: float, high: float, kinks: tuple[float, ...]) -> list[float]:
    """Seven points strictly inside (low, high), none at a kink."""
    if math.isinf(low) and math.isinf(high):
        points = [-2.3, -1.1, -0.4, 0.3, 0.8, 1.7, 2.9]
    elif math.isinf(high):
        points = [low + d for d in (0.05, 0.3, 0.7, 1.2, 2.0, 3.5, 6.0)]
    else:
        points = [low + (high - low) * f for f in (0.03, 0.15, 0.3, 0.45, 0.6, 0.8, 0.97)]
    return [p for p in points if all(abs(p - k) > 1e-3 for k in kinks)]


def sympy_value(expr: sympy.Expr, subs: dict) -> float:
    value = sympy.N(expr.subs(subs), 30)
    return float(value)


def assert_close(torch_value: float, sympy_value_: float, context: str) -> None:
    assert abs(torch_value - sympy_value_) <= ATOL + RTOL * abs(sympy_value_), (
        f"{context}: torch {torch_value!r} vs sympy {sympy_value_!r}"
    )


def check_elementwise(text: str, points: dict[str, list[float]]) -> None:
    """Build `text` in torch on vectors of points; read it with sympy on scalar symbols."""
    program = parse(text)
    tensors = {
        name: torch.tensor(points[name], dtype=torch.float64, requires_grad=True) for name in program.variables
    }
    out = build(program, tensors).output
    symbols = {name: sympy.Symbol(name, real=True) for name in program.variables}
    expr = to_sympy(program, symbols)
    count = len(next(iter(points.values())))
    expected_shape = (count,)
    assert tuple(out.shape) == expected_shape, text
    for i in range(count):
        subs = {symbols[name]: sympy.Float(points[name][i], 30) for name in program.variables}
        assert_close(out[i].item(), sympy_value(expr, subs), f"{text} at {subs}")


def check_arrays(text: str, arrays: dict[str, np.ndarray]) -> None:
    """Build `text` in torch on arrays; read it with sympy on arrays of element symbols."""
    program = parse(text)
    tensors = {name: torch.tensor(arrays[name], dtype=torch.float64, requires_grad=True) for name in program.variables}
    out = build(program, tensors).output
    symbols, subs = {}, {}
    for name in program.variables:
        array = np.asarray(arrays[name], dtype=float)
        flat = [sympy.Symbol(f"{name}_{i}", real=True) for i in range(array.size)]
        symbols[name] = np.array(flat, dtype=object).reshape(array.shape)
        subs.update({s: sympy.Float(v, 30) for s, v in zip(flat, array.flat)})
    value = to_sympy(program, symbols)
    value = np.asarray(value, dtype=object)
    assert tuple(out.shape) == value.shape, text
    for got, exact in zip(out.detach().reshape(-1).tolist(), value.reshape(-1)):
        assert_close(got, sympy_value(sympy.sympify(exact), subs), text)


# -- elementwise unary rows: every one, in function and method form ---------------------------
UNARY = [op for op in OPS_LIST if op.kind == "elementwise" and len(op.params) == 1]


@pytest.mark.parametrize("op", UNARY, ids=[op.name for op in UNARY])
def test_unary_row_function_form(op):
    check_elementwise(f"{op.name}(x)", {"x": sample_points(*op.domain, op.kinks)})


@pytest.mark.parametrize("op", [op for op in UNARY if op.method], ids=[op.name for op in UNARY if op.method])
def test_unary_row_method_form(op):
    check_elementwise(f"x.{op.name}()", {"x": sample_points(*op.domain, op.kinks)})


# -- rows with more parameters ---------------------------------------------------------------------
P = [-1.7, -0.6, 0.25, 0.9, 1.6, 2.4]
Q = [0.5, -1.2, 1.1, 0.3, 2.0, -0.1]
POS = [0.3, 0.8, 1.3, 2.2, 0.05, 3.7]

MULTI = {
    "pow": [("pow(x, 2.5)", {"x": POS}), ("x.pow(3)", {"x": P}), ("pow(x, y)", {"x": POS, "y": Q}),
            ("x.pow(y)", {"x": POS, "y": Q}), ("pow(2, x)", {"x": P}), ("x.pow(-2)", {"x": POS})],
    "clamp": [("clamp(x, -0.5, 0.8)", {"x": P}), ("x.clamp(min=0.1)", {"x": P}), ("clamp(x, max=0.3)", {"x": P}),
              ("clamp(x, min=y)", {"x": P, "y": Q}), ("x.clamp(y, y + 1)", {"x": P, "y": Q}),
              # min > max: torch sets every element to max
              ("clamp(x, 0.8, -0.5)", {"x": P})],
    "where": [("where(x > 0.2, x**2, -x)", {"x": P}), ("where(x <= y, x, y)", {"x": P, "y": Q}),
              ("where(x >= 0.9, 1, x)", {"x": P}), ("where(x < y, exp(x), 2)", {"x": P, "y": Q})],
    "maximum": [("maximum(x, y)", {"x": P, "y": Q}), ("x.maximum(y)", {"x": P, "y": Q}), ("maximum(x, x * 0 + 0.5)", {"x": P})],
    "minimum": [("minimum(x, y)", {"x": P, "y": Q}), ("x.minimum(y)", {"x": P, "y": Q})],
    "softplus": [("softplus(x)", {"x": P}), ("softplus(x, beta=2, threshold=3)", {"x": P}),
                 ("softplus(x, 0.5)", {"x": P}), ("softplus(x * 20)", {"x": P})],
}


@pytest.mark.parametrize(
    ("text", "points"),
    [case for cases in MULTI.values() for case in cases],
    ids=[text for cases in MULTI.values() for text, _ in cases],
)
def test_rows_with_parameters(text, points):
    check_elementwise(text, points)


# -- reductions, softmax, matmul: one symbol per element ------------------------------------
A = np.array([[0.3, -1.2, 0.8], [1.5, 0.1, -0.6]])
B = np.array([[0.2, 0.4, -1.0, 0.7], [1.1, -0.3, 0.5, 0.9], [-0.8, 0.6, 0.25, -0.4]])
V = np.array([0.5, -0.7, 1.3])
W = np.array([1.2, 0.3, -0.9])

ARRAY_CASES = {
    "sum": ["sum(A)", "sum(A, dim=1)", "A.sum(dim=0, keepdim=True)", "A.sum(dim=(0, 1))", "sum(A, -1)"],
    "mean": ["mean(A)", "A.mean(dim=1)", "mean(A, dim=(1, 0), keepdim=True)"],
    "prod": ["prod(A)", "A.prod(dim=0)", "prod(A, dim=1, keepdim=True)"],
    "logsumexp": ["logsumexp(A, 1)", "A.logsumexp(dim=0, keepdim=True)", "logsumexp(A, dim=(0, 1))"],
    "softmax": ["softmax(A, dim=1)", "A.softmax(0)", "softmax(V, -1)"],
    "log_softmax": ["log_softmax(A, dim=1)", "A.log_softmax(dim=0)"],
    "matmul": ["matmul(A, B)", "A.matmul(B)", "matmul(V, W)", "matmul(A, V)", "matmul(V, B)"],
    "operators": ["A @ B", "V @ W", "A @ V", "A + V", "A * V - W", "A / (V * V + 1)", "(A * A + 1) ** V", "-A"],
}


@pytest.mark.parametrize(
    "text", [t for texts in ARRAY_CASES.values() for t in texts], ids=[t for texts in ARRAY_CASES.values() for t in texts]
)
def test_array_rows(text):
    check_arrays(text, {"A": A, "B": B, "V": V, "W": W})


@pytest.mark.parametrize(
    "text", ["x + y", "x - y", "x * y", "x / y", "x ** 2", "2 ** y", "-x", "+x", "x * pi + e", "1e-3 * x"]
)
def test_operators_elementwise(text):
    check_elementwise(text, {"x": POS, "y": Q})


def test_every_row_is_tested_here():
    from test_losses import LOSS_CASES
    from test_shapes import SHAPE_CASES

    tested = ({op.name for op in UNARY} | set(MULTI) | (set(ARRAY_CASES) - {"operators"}) | set(LOSS_CASES)
              | set(SHAPE_CASES) | {"cosine_similarity"})
    assert tested == set(OPS)


def test_method_flag_matches_torch():
    # method=True rows must exist as Tensor methods taking the input as the receiver.
    for op in OPS_LIST:
        if op.method:
            assert hasattr(torch.Tensor, op.name), op.name
    assert not OPS["where"].method  # Tensor.where(condition, other) takes the input first
    assert not OPS["logsigmoid"].method and not OPS["softplus"].method


def test_torch_paths_resolve():
    from gradcli.language.ops import resolve_torch

    for op in OPS_LIST:
        found = resolve_torch(op.torch)
        # x.T and x.mT are properties of Tensor, not callables
        assert callable(found) or (op.form == "attribute" and isinstance(found, property | type(torch.Tensor.T))), op.torch


def test_domains_and_kinks_are_consistent():
    for op in OPS_LIST:
        low, high = op.domain
        assert low < high, op.name
        assert all(low < k < high for k in op.kinks), op.name
    assert OPS["abs"].kinks == (0.0,) and OPS["relu"].kinks == (0.0,)
    assert OPS["log"].domain == (0.0, math.inf)
    assert OPS["acosh"].domain == (1.0, math.inf)
    assert OPS["atanh"].domain == (-1.0, 1.0)


def test_kinds_and_boundaries_are_typed_values():
    from typing import get_args

    from gradcli.language.ops import OpKind, ParamKind

    for op in OPS_LIST:
        assert op.kind in get_args(OpKind), op.name
        assert all(p.kind in get_args(ParamKind) for p in op.params), op.name
        # a boundary parameter is a parameter of the row, and not its input
        assert set(op.meets) <= {p.name for p in op.params[1:]}, op.name
    assert OPS["maximum"].meets == ("other",) and OPS["clamp"].meets == ("min", "max")


def test_symbolic_forms_named_in_the_issue():
    x = sympy.Symbol("x")
    assert to_sympy(parse("sigmoid(x)"), {"x": x}) == 1 / (1 + sympy.exp(-x))
    assert to_sympy(parse("where(x > 0, x, 0.1 * x)"), {"x": x}) == sympy.Piecewise(
        (x, x > 0), (sympy.Rational(1, 10) * x, True)
    )
    assert to_sympy(parse("relu(x)"), {"x": x}) == sympy.Piecewise((x, x > 0), (0, True))
    assert to_sympy(parse("log2(x)"), {"x": x}) == sympy.log(x) / sympy.log(2)
