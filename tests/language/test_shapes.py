"""The shape and indexing rows (issue 25): torch's value equals the sympy meaning, and each
derivative row (the gradient goes back where each element came from) equals torch's backward.

The truth is torch, run here: the built tensor against sympy's array element by element
(check_arrays, from test_ops), and each row's vjp against `torch.autograd.grad` of the same
call with a random upstream gradient.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch

from gradcli.interpret.to_torch import build
from gradcli.errors import GradcliError
from gradcli.language.derivatives import LOCALS
from gradcli.language.ops import OPS
from gradcli.language.parser import parse
from test_ops import check_arrays

A = np.array([[0.3, -1.2, 0.8], [1.5, 0.1, -0.6]])
V = np.array([0.5, -0.7, 1.3])

#: op name -> expressions using it, each built in torch and translated to sympy.
SHAPE_CASES = {
    "reshape": ["A.reshape(3, 2)", "A.reshape(-1)", "reshape(A, (1, 6))"],
    "view": ["A.view(-1, 2)", "A.view((3, 2))"],
    "flatten": ["A.flatten()", "flatten(A, 0, 1)", "A[None].flatten(1, 2)"],
    "unflatten": ["A.unflatten(1, (3, 1))", "unflatten(A.flatten(), 0, (3, -1))"],
    "transpose": ["A.transpose(0, 1)", "transpose(A, -1, 0)"],
    "permute": ["A.permute(1, 0)", "A[None].permute((2, 0, 1))"],
    "T": ["A.T", "A[:, :2].T"],
    "mT": ["A.mT", "A[None].mT"],
    "squeeze": ["A[None].squeeze(0)", "A[:, None].squeeze()", "A.squeeze(0)"],
    "unsqueeze": ["A.unsqueeze(1)", "V.unsqueeze(-1)"],
    "expand": ["V.expand(2, 3)", "V.expand(2, -1)", "A[:, :1].expand(-1, 4)"],
    "repeat": ["A.repeat(2, 1)", "V.repeat(2, 2)"],
    "cat": ["cat([A, A * 2], dim=0)", "cat((A, A[:, :1]), dim=-1)"],
    "stack": ["stack([V, V + 1], dim=1)", "stack([A, A])"],
    "chunk": ["A.chunk(2, dim=1)[0]", "A.chunk(2, dim=1)[1]", "chunk(V, 3)[2]"],
    "split": ["A.split(1)[1]", "A.split((1, 2), dim=1)[1]", "split(V, 2)[1]"],
    "gather": ["gather(A, 1, arange(2).unsqueeze(1))", "A.gather(0, arange(2).unsqueeze(0))"],
    "index_select": ["index_select(A, 1, arange(3)[1:])", "A.index_select(0, arange(2)[[1, 0, 1]])"],
    "masked_fill": ["masked_fill(A, A > 0, 0.5)", "A.masked_fill(arange(3) < 2, -1.0)"],
    "getitem": ["A[0]", "A[:, 1:]", "A[:, :-1]", "A[..., ::2]", "A[None, 1, None]", "A[:, [0, 2]]",
                "A[:, arange(3) > 0]", "A[arange(2), arange(2)]", "V[-1]", "A[-1, -2:]"],
    "arange": ["V * arange(3)", "V[arange(1, 3)]", "V[arange(0, 3, 2)]"],
}


@pytest.mark.parametrize("text", [t for texts in SHAPE_CASES.values() for t in texts])
def test_torch_equals_the_sympy_meaning(text):
    check_arrays(text, {"A": A, "V": V})


#: (op, input shape, the call, as text with `u` the input) for each vjp row.
VJP_CASES = [
    ("reshape", (2, 3), "u.reshape(3, 2)"), ("view", (2, 3), "u.view(-1)"), ("flatten", (2, 3), "u.flatten()"),
    ("unflatten", (6,), "u.unflatten(0, (2, 3))"), ("transpose", (2, 3), "u.transpose(0, 1)"),
    ("permute", (2, 3, 2), "u.permute(2, 0, 1)"), ("T", (2, 3), "u.T"), ("mT", (2, 2, 3), "u.mT"),
    ("squeeze", (1, 3), "u.squeeze(0)"), ("unsqueeze", (3,), "u.unsqueeze(0)"),
    ("expand", (1, 3), "u.expand(4, 3)"), ("repeat", (2, 3), "u.repeat(2, 2)"),
    ("gather", (2, 3), "u.gather(1, i)"), ("index_select", (2, 3), "u.index_select(1, j)"),
    ("getitem", (3, 4), "u[1:, ::2]"), ("getitem", (3, 4), "u[j]"), ("getitem", (3, 4), "u[None, ..., -1]"),
    ("masked_fill", (2, 3), "u.masked_fill(m, 0.0)"),
]


@pytest.mark.parametrize("key, shape, text", VJP_CASES, ids=[c[2] for c in VJP_CASES])
def test_each_vjp_row_is_torchs_backward(key, shape, text):
    rng = np.random.default_rng(3)
    index = torch.tensor([[2, 0], [1, 2]])
    j = torch.tensor([2, 0, 2])
    mask = torch.tensor([[True, False, True], [False, False, True]])
    u = torch.tensor(rng.uniform(-1, 1, shape), requires_grad=True)
    out = build(parse(text), {"u": u, "i": index, "j": j, "m": mask}).output
    g = torch.tensor(rng.uniform(-1, 1, tuple(out.shape)))
    (expected,) = torch.autograd.grad(out, u, g)
    # The row's vjp, with the arguments as the chain rule records them (literals as written).
    recorded: dict = {}
    build(parse(text), {"u": u, "i": index, "j": j, "m": mask},
          applied=lambda name, args, kwargs, result: recorded.setdefault(name, (args, kwargs)))
    args, kwargs = recorded[key]
    bound = dict(zip([p.name for p in OPS[key].params], args)) | kwargs
    values = {name: np.asarray(v.detach().tolist(), dtype=object) if isinstance(v, torch.Tensor) else v
              for name, v in bound.items()}
    values["input"] = np.asarray(u.detach().tolist(), dtype=object)
    grads = LOCALS[key].vjp(sp, np, np.asarray(g.tolist(), dtype=object), values, None)
    ours = np.asarray(grads["input"], dtype=float)
    assert np.allclose(ours, expected.numpy(), rtol=1e-12, atol=1e-14), (text, ours, expected)


def test_every_new_op_has_a_derivative_row_or_a_refusal_by_name():
    for name, op in OPS.items():
        assert name in LOCALS, name
    for name in ("cat", "stack", "chunk", "split", "cross_entropy", "kl_div"):
        assert LOCALS[name].refused, name


@pytest.mark.parametrize(
    "text, words",
    [
        ("cat([x, x]).sum()", "--symbolic has no formula for cat"),
        ("x.chunk(2)[0].sum()", "--symbolic has no formula for chunk"),
    ],
)
def test_symbolic_refuses_by_name(text, words):
    from gradcli.tracing.trace import trace

    with pytest.raises(GradcliError, match=words):
        trace(text, ["x=[1.0, 2.0, 3.0, 4.0]"], symbolic=True)


@pytest.mark.parametrize(
    "text, var",
    [
        ("(x.reshape(2, 3).T * w).sum()", ["x=[0.1, -0.4, 0.7, 1.2, -1.5, 0.3]", "w=[[1.0, 2.0], [0.5, -1.0], [0.3, 0.2]]"]),
        ("(x[:, 1:] * x[:, :-1]).sum() + x.unsqueeze(0).expand(2, 2, 3).pow(2).sum()", ["x=[[0.1, -0.4, 0.7], [1.2, -1.5, 0.3]]"]),
        ("gather(x, 1, i).pow(2).sum() + x[i[:, 0]].sum()", ["x=[[0.1, -0.4, 0.7], [1.2, -1.5, 0.3]]", "i=randint(0, 2, (2, 1))"]),
        ("masked_fill(x, x > 0, 0).pow(2).sum()", ["x=[0.1, -0.4, 0.7]"]),
    ],
)
def test_symbolic_follows_the_shape_rows_and_agrees_with_torch(text, var):
    from gradcli.tracing.trace import trace

    result = trace(text, var, symbolic=True, seed=0)
    edges = [edge for node in result.symbolic.nodes for edge in node.edges]
    assert edges and all(edge.numbers is None or edge.numbers.agrees is not False for edge in edges)
    assert any(edge.numbers is not None and edge.numbers.agrees for edge in edges)


def test_check_computes_the_exact_derivative_through_shapes():
    from gradcli.verify.expression.check import check

    result = check("(x.reshape(2, 2).T @ x.reshape(2, 2)).sum() + cat([x, x[:2]]).pow(2).sum()",
                   ["x=[0.3, -1.2, 0.8, 1.5]"])
    assert result.ok


def test_a_float_index_says_how_to_give_integers():
    with pytest.raises(GradcliError) as info:
        build(parse("x[i].sum()"), {"x": torch.randn(3), "i": torch.tensor([1.0, 0.0])})
    assert "randint" in info.value.render() and "column 1" in info.value.render()


@pytest.mark.parametrize(
    "text, message",
    [
        ("x[::-1]", "a slice step must be positive"),
        ("x[0.5]", "an index must be an integer"),
        ("x.repeat(100000, 100000)", "the limit is"),
        ("arange(10**12)", "the limit is"),
        ("x.reshape(5, 7)", "torch refused 'reshape'"),
        ("x.foo", "a Tensor has no field 'foo'"),
    ],
)
def test_bad_shapes_are_one_clear_error_with_the_column(text, message):
    with pytest.raises(GradcliError) as info:
        build(parse(text), {"x": torch.randn(3, 4)})
    rendered = info.value.render()
    assert message in rendered and "column" in rendered
