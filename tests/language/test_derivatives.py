"""Every row of the local-derivative table (language/derivatives.py) against sympy's
differentiation of the op's own meaning (ops.py) and against torch's backward of that op,
at random points inside the op's domain."""

from __future__ import annotations

import math
import operator
import random

import numpy as np
import pytest
import sympy as sp
import torch

from gradcli.language.derivatives import LOCALS, LOCALS_LIST, OPERATOR_PARAMS
from gradcli.language.ops import OPS, REQUIRED

POINTS = 5
RTOL, ATOL = 1e-9, 1e-12

_FORWARD = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "**": operator.pow,
            "neg": operator.neg}
#: Where each operator's or function's tensor parameters are drawn (inside domains, off kinks).
_RANGES = {
    "/": {"other": (0.5, 2.0)}, "**": {"self": (0.3, 2.0), "other": (-1.5, 1.5)},
    "pow": {"input": (0.3, 2.0), "exponent": (-1.5, 1.5)},
    "clamp": {"input": (-1.0, 1.0), "min": (-0.6, -0.2), "max": (0.2, 0.6)},
}
ELEMENTWISE = [row for row in LOCALS_LIST if not row.coupling and row.partials]
COUPLING = [row for row in LOCALS_LIST if row.coupling]


def _params(key: str) -> list:
    if key in OPERATOR_PARAMS:
        return [(name, "tensor", REQUIRED) for name in OPERATOR_PARAMS[key]]
    return [(p.name, p.kind, p.default) for p in OPS[key].params]


def _range(key: str, param: str) -> tuple[float, float]:
    if param in _RANGES.get(key, {}):
        return _RANGES[key][param]
    op = OPS.get(key)
    lo, hi = op.domain if op is not None else (-math.inf, math.inf)
    lo, hi = max(lo, -2.0) + 0.05, min(hi, 2.0) - 0.05
    if key == "tan":
        lo, hi = -1.2, 1.2
    return lo, hi


def _draw(rng: random.Random, key: str, param: str) -> float:
    lo, hi = _range(key, param)
    value = rng.uniform(lo, hi)
    if op_kinks(key) and abs(value) < 0.05:
        value += 0.1
    return value


def op_kinks(key: str) -> tuple:
    op = OPS.get(key)
    return op.kinks if op is not None else ()


def _sympy_meaning(key: str, args: list) -> object:
    if key in _FORWARD:
        return _FORWARD[key](*args)
    return OPS[key].sympy(sp, *args)


def _torch_forward(key: str, args: list) -> torch.Tensor:
    if key in _FORWARD:
        return _FORWARD[key](*args)
    op = OPS[key]
    fn = getattr(torch.nn.functional, key) if op.torch.startswith("torch.nn.functional") else getattr(torch, key)
    if key == "clamp":
        return fn(args[0], min=args[1], max=args[2])
    return fn(*args)


@pytest.mark.parametrize("row", ELEMENTWISE, ids=lambda r: r.op)
def test_each_partial_is_sympys_derivative_and_torchs_backward(row):
    rng = random.Random(hash(row.op) % 1000)
    params = _params(row.op)
    for _ in range(POINTS):
        values, symbols, tensors = [], [], []
        condition = rng.random() < 0.5
        for name, kind, default in params:
            if kind == "cond":
                values.append(condition)
                symbols.append(sp.true if condition else sp.false)
                tensors.append(torch.tensor(condition))
            elif kind == "number":
                values.append(default)
                symbols.append(sp.Float(default))
                tensors.append(default)
            else:
                v = _draw(rng, row.op, name)
                values.append(v)
                symbols.append(sp.Symbol(name, real=True))
                tensors.append(torch.tensor(v, dtype=torch.float64, requires_grad=True))
        at = {s: v for s, v in zip(symbols, values) if isinstance(s, sp.Symbol)}
        forward = _sympy_meaning(row.op, symbols)
        out = _torch_forward(row.op, tensors)
        grads = torch.autograd.grad(out, [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad])
        grad_of = dict(zip([n for (n, k, d), t in zip(params, tensors) if isinstance(t, torch.Tensor) and t.requires_grad], grads))
        for name, partial in row.partials.items():
            formula = partial.formula(sp, *symbols, forward)
            ours = float(formula.subs(at))
            exact = float(sp.diff(forward, sp.Symbol(name, real=True)).subs(at))
            assert math.isclose(ours, exact, rel_tol=RTOL, abs_tol=ATOL), (row.op, name, at, ours, exact)
            # The same formula with `out` as torch computed it, against torch's backward.
            with_torch_out = float(partial.formula(sp, *symbols, sp.Float(out.item(), 30)).subs(at))
            assert math.isclose(with_torch_out, grad_of[name].item(), rel_tol=1e-7, abs_tol=1e-10), (row.op, name, at)


def test_every_operation_and_operator_has_a_row():
    # Loss rows (issue 13) couple scores with integer labels; --symbolic refuses them by name
    # (test_symbolic_refuses_a_loss_by_name), their gradients are checked in test_losses.py.
    assert {name for name, op in OPS.items() if op.kind != "loss"} <= set(LOCALS)
    assert set(OPERATOR_PARAMS) <= set(LOCALS)
    for row in ELEMENTWISE:
        assert set(row.partials) <= {name for name, _, _ in _params(row.op)}, row.op


_COUPLED_CASES = [
    ("sum", (2, 3), {"dim": 1, "keepdim": False}), ("sum", (3,), {}),
    ("mean", (2, 3), {"dim": 0, "keepdim": True}), ("mean", (4,), {}),
    ("prod", (2, 3), {"dim": 1, "keepdim": False}), ("prod", (3,), {}),
    ("logsumexp", (2, 3), {"dim": 1, "keepdim": False}),
    ("softmax", (2, 3), {"dim": 1}), ("softmax", (3,), {"dim": 0}),
    ("log_softmax", (2, 3), {"dim": 0}),
    ("matmul", ((2, 3), (3, 2)), {}), ("matmul", ((3,), (3, 2)), {}), ("matmul", ((2, 3), (3,)), {}),
    ("matmul", ((3,), (3,)), {}),
]


@pytest.mark.parametrize("key, shape, options", _COUPLED_CASES, ids=lambda v: str(v))
def test_each_vjp_is_sympys_jacobian_and_torchs_backward(key, shape, options):
    rng = np.random.default_rng(7)
    row = LOCALS[key]
    shapes = shape if key == "matmul" else (shape,)
    names = ["input", "other"][: len(shapes)]
    symbols = {n: np.array([sp.Symbol(f"{n}{i}", real=True) for i in range(int(np.prod(s)))], dtype=object).reshape(s)
               for n, s in zip(names, shapes)}
    values = {n: rng.uniform(0.3, 1.5, s) for n, s in zip(names, shapes)}
    at = {symbols[n].flat[i]: float(values[n].flat[i]) for n in names for i in range(values[n].size)}
    forward = np.asarray(OPS[key].sympy(sp, np, *(symbols[n] for n in names), **options), dtype=object)
    g_values = rng.uniform(-1, 1, forward.shape)
    g = np.asarray(np.vectorize(lambda v: sp.Float(v, 30), otypes=[object])(g_values), dtype=object)
    tensors = {n: torch.tensor(values[n], dtype=torch.float64, requires_grad=True) for n in names}
    fn = getattr(torch, key)
    out = fn(*(tensors[n] for n in names), **options)
    out.backward(torch.tensor(g_values, dtype=torch.float64))
    ours = row.vjp(sp, np, g, symbols, forward, **options)
    for n in names:
        for i in range(values[n].size):
            variable = symbols[n].flat[i]
            exact = sum(gj * sp.diff(fj, variable) for gj, fj in zip(g.flat, forward.flat))
            mine = float(np.asarray(ours[n], dtype=object).flat[i].subs(at))
            assert math.isclose(mine, float(exact.subs(at)), rel_tol=RTOL, abs_tol=ATOL), (key, n, i)
            assert math.isclose(mine, tensors[n].grad.reshape(-1)[i].item(), rel_tol=1e-7, abs_tol=1e-10), (key, n, i)


@pytest.mark.parametrize("key, count", [("sum", 5), ("mean", 5)])
def test_a_whole_reduction_read_elementwise(key, count):
    x = torch.rand(count, dtype=torch.float64, requires_grad=True)
    getattr(torch, key)(x).backward()
    per_element = float(LOCALS[key].per_element(sp, count))
    assert torch.allclose(x.grad, torch.full((count,), per_element, dtype=torch.float64))


def test_symbolic_refuses_a_loss_by_name():
    from gradcli.errors import UsageError
    from gradcli.tracing.trace import trace

    with pytest.raises(UsageError, match="no local-derivative rows for the loss functions \\(mse_loss\\)"):
        trace("mse_loss(x, y)", ["x=[1.0, 2.0]", "y=[0.5, 0.5]"], symbolic=True)
