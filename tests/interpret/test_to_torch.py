"""The torch builder builds exactly what the equivalent PyTorch code builds.

For each expression the same computation is written directly in PyTorch; both graphs are
walked from the output (depth first over `next_functions`) and must give the same sequence
of node names, the same `None` inputs, the same leaves, and bit-identical values.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gradcli import limits
from gradcli.interpret.to_torch import SPAN_KEY, build
from gradcli.errors import ArgumentError, LimitError, ShapeError, Span, UnknownNameError
from gradcli.pipeline import parse  # the parser with the expression library, as gradcli.parse


def leaves() -> dict[str, torch.Tensor]:
    """Fresh leaves with values inside every op's domain (0 < v < 1 for asin/atanh/log)."""
    g = torch.Generator().manual_seed(0)
    return {
        "x": (0.1 + 0.8 * torch.rand(3, generator=g, dtype=torch.float64)).requires_grad_(),
        "y": (0.1 + 0.8 * torch.rand(3, generator=g, dtype=torch.float64)).requires_grad_(),
        "A": torch.randn(2, 3, generator=g, dtype=torch.float64).requires_grad_(),
        "B": torch.randn(3, 4, generator=g, dtype=torch.float64).requires_grad_(),
        "c": (1.5 + torch.rand(3, generator=g, dtype=torch.float64)).requires_grad_(),
    }


def graph_signature(output: torch.Tensor, names: dict[int, str]) -> list[tuple[str, tuple]]:
    """Depth-first walk: each distinct node once, with the names of its inputs."""
    signature: list[tuple[str, tuple]] = []
    seen: set[int] = set()
    stack = [output.grad_fn]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        name = node.name()
        if name == "torch::autograd::AccumulateGrad":
            name += ":" + names[id(node.variable)]
        nexts = tuple(None if nxt is None else nxt.name() for nxt, _ in node.next_functions)
        signature.append((name, nexts))
        stack.extend(nxt for nxt, _ in reversed(node.next_functions) if nxt is not None)
    return signature


def t(v: float) -> torch.Tensor:
    # What the builder does with a plain number where torch needs a tensor: the leaves' dtype.
    return torch.tensor(v, dtype=torch.float64)


# (expression, the same computation written directly in PyTorch)
SAME_GRAPH = [
    ("x + y", lambda x, y, A, B, c: x + y),
    ("x - 2", lambda x, y, A, B, c: x - 2),
    ("x * 2", lambda x, y, A, B, c: x * 2),
    ("2 / x", lambda x, y, A, B, c: 2 / x),
    ("x / y", lambda x, y, A, B, c: x / y),
    ("x ** 2", lambda x, y, A, B, c: x**2),
    ("x ** y", lambda x, y, A, B, c: x**y),
    ("2 ** x", lambda x, y, A, B, c: 2**x),
    ("A @ B", lambda x, y, A, B, c: A @ B),
    ("x @ y", lambda x, y, A, B, c: x @ y),
    ("-x", lambda x, y, A, B, c: -x),
    ("+x * 3", lambda x, y, A, B, c: +x * 3),
    ("h = x*x + x; h = h*h + h; h.sum()", None),  # written out below
    ("x.pow(2).sum()", lambda x, y, A, B, c: x.pow(2).sum()),
    ("pow(x, 3)", lambda x, y, A, B, c: torch.pow(x, 3)),
    ("pow(x, y)", lambda x, y, A, B, c: torch.pow(x, y)),
    ("x.pow(y)", lambda x, y, A, B, c: x.pow(y)),
    ("abs(x - 0.5)", lambda x, y, A, B, c: torch.abs(x - 0.5)),
    ("sqrt(x) + rsqrt(x)", lambda x, y, A, B, c: torch.sqrt(x) + torch.rsqrt(x)),
    ("square(x) * reciprocal(y)", lambda x, y, A, B, c: torch.square(x) * torch.reciprocal(y)),
    ("exp(x) + expm1(y)", lambda x, y, A, B, c: torch.exp(x) + torch.expm1(y)),
    ("log(x) + log1p(x) + log2(x) + log10(x)",
     lambda x, y, A, B, c: torch.log(x) + torch.log1p(x) + torch.log2(x) + torch.log10(x)),
    ("sin(x) * cos(y) - tan(x)", lambda x, y, A, B, c: torch.sin(x) * torch.cos(y) - torch.tan(x)),
    ("asin(x) + acos(y) + atan(x)", lambda x, y, A, B, c: torch.asin(x) + torch.acos(y) + torch.atan(x)),
    ("sinh(x) + cosh(x) + tanh(x)", lambda x, y, A, B, c: torch.sinh(x) + torch.cosh(x) + torch.tanh(x)),
    ("asinh(x) + acosh(c) + atanh(y)", lambda x, y, A, B, c: torch.asinh(x) + torch.acosh(c) + torch.atanh(y)),
    ("sigmoid(x) * logsigmoid(y)", lambda x, y, A, B, c: torch.sigmoid(x) * F.logsigmoid(y)),
    ("softplus(x) + softplus(y, beta=2, threshold=10)",
     lambda x, y, A, B, c: F.softplus(x) + F.softplus(y, beta=2, threshold=10)),
    ("relu(x - 0.5)", lambda x, y, A, B, c: torch.relu(x - 0.5)),
    ("erf(x) + erfc(y)", lambda x, y, A, B, c: torch.erf(x) + torch.erfc(y)),
    ("clamp(x, 0.2, 0.7)", lambda x, y, A, B, c: torch.clamp(x, 0.2, 0.7)),
    ("clamp(x, min=y)", lambda x, y, A, B, c: torch.clamp(x, min=y)),
    ("x.clamp(max=0.5)", lambda x, y, A, B, c: x.clamp(max=0.5)),
    ("where(x > 0.5, x, 0.1 * x)", lambda x, y, A, B, c: torch.where(x > 0.5, x, 0.1 * x)),
    ("where(x <= y, x * y, 2)", lambda x, y, A, B, c: torch.where(x <= y, x * y, 2)),
    ("maximum(x, y) - minimum(x, y)", lambda x, y, A, B, c: torch.maximum(x, y) - torch.minimum(x, y)),
    ("sum(A, dim=1)", lambda x, y, A, B, c: torch.sum(A, dim=1)),
    ("A.sum(dim=(0, 1), keepdim=True)", lambda x, y, A, B, c: A.sum(dim=(0, 1), keepdim=True)),
    ("mean(A) + A.mean(dim=0).sum()", lambda x, y, A, B, c: torch.mean(A) + A.mean(dim=0).sum()),
    ("prod(x) + A.prod(dim=1).sum()", lambda x, y, A, B, c: torch.prod(x) + A.prod(dim=1).sum()),
    ("logsumexp(A, 1)", lambda x, y, A, B, c: torch.logsumexp(A, 1)),
    ("A.logsumexp(dim=0, keepdim=True)", lambda x, y, A, B, c: A.logsumexp(dim=0, keepdim=True)),
    ("softmax(A, dim=1)", lambda x, y, A, B, c: torch.softmax(A, dim=1)),
    ("A.log_softmax(0)", lambda x, y, A, B, c: A.log_softmax(0)),
    ("matmul(A, B).sum()", lambda x, y, A, B, c: torch.matmul(A, B).sum()),
    ("x.exp().log().sigmoid().tanh()", lambda x, y, A, B, c: x.exp().log().sigmoid().tanh()),
    ("exp(2) * x", lambda x, y, A, B, c: torch.exp(t(2)) * x),
    ("x * pi + e", lambda x, y, A, B, c: x * math.pi + math.e),
    # shapes and indexing (issue 25): views, copies and picks build torch's own nodes
    ("A.reshape(3, 2) @ A.view(-1, 2).T", lambda x, y, A, B, c: A.reshape(3, 2) @ A.view(-1, 2).T),
    ("flatten(A) * unflatten(A, 1, (3, 1)).flatten(0, 1).squeeze(1)",
     lambda x, y, A, B, c: torch.flatten(A) * torch.unflatten(A, 1, (3, 1)).flatten(0, 1).squeeze(1)),
    ("transpose(A, 0, 1) + A.permute(1, 0) + A.mT", lambda x, y, A, B, c: torch.transpose(A, 0, 1) + A.permute(1, 0) + A.mT),
    ("x.unsqueeze(0).expand(2, 3) * A.repeat(1, 1)", lambda x, y, A, B, c: x.unsqueeze(0).expand(2, 3) * A.repeat(1, 1)),
    ("cat([x, y]) + stack([x, y]).flatten()", lambda x, y, A, B, c: torch.cat([x, y]) + torch.stack([x, y]).flatten()),
    ("A.chunk(3, dim=1)[1] + split(A, 1, dim=1)[2]", lambda x, y, A, B, c: A.chunk(3, dim=1)[1] + torch.split(A, 1, dim=1)[2]),
    ("gather(A, 1, arange(2).unsqueeze(1)) + index_select(A, 1, arange(1))",
     lambda x, y, A, B, c: torch.gather(A, 1, torch.arange(2).unsqueeze(1)) + torch.index_select(A, 1, torch.arange(1))),
    ("masked_fill(A, A > 0, 0.5)[:, 1:][..., None, ::2][A[:, 0] > 0]",
     lambda x, y, A, B, c: torch.masked_fill(A, A > 0, 0.5)[:, 1:][..., None, ::2][A[:, 0] > 0]),
    ("cosine_similarity(A, A * A, dim=1)", lambda x, y, A, B, c: F.cosine_similarity(A, A * A, dim=1)),
]


def _intermediates(x, y, A, B, c):
    h = x * x + x
    h = h * h + h
    return h.sum()


@pytest.mark.parametrize(("text", "direct"), SAME_GRAPH, ids=[text for text, _ in SAME_GRAPH])
def test_builds_the_same_graph_as_direct_pytorch(text, direct):
    direct = direct or _intermediates
    ours_leaves, theirs_leaves = leaves(), leaves()
    built = build(parse(text), ours_leaves)
    expected = direct(**theirs_leaves)
    names_ours = {id(v): k for k, v in ours_leaves.items()}
    names_theirs = {id(v): k for k, v in theirs_leaves.items()}
    assert graph_signature(built.output, names_ours) == graph_signature(expected, names_theirs)
    assert built.output.dtype == expected.dtype
    assert torch.equal(built.output, expected)


def test_every_operation_appears_in_the_same_graph_table():
    from gradcli.language.ops import OPS

    covered = " ".join(text for text, _ in SAME_GRAPH)
    # Loss rows take class indices (integer tensors) that this table's leaves cannot give;
    # test_losses.py compares their graphs, values and gradients with torch.nn.functional.
    written = {"call": "{}(", "attribute": ".{}", "subscript": "["}
    missing = [name for name, op in OPS.items()
               if written[op.form].format(name) not in covered and op.kind != "loss"]
    assert missing == []
    for operator in ["+", "-", "*", "/", "**", "@"]:
        assert f" {operator} " in covered


@pytest.mark.parametrize(
    ("text", "root", "inputs"),
    [
        ("x * 2", "MulBackward0", ("torch::autograd::AccumulateGrad", None)),
        ("x.pow(2)", "PowBackward0", ("torch::autograd::AccumulateGrad",)),
        ("x ** y", "PowBackward1", ("torch::autograd::AccumulateGrad", "torch::autograd::AccumulateGrad")),
        ("x.sum()", "SumBackward0", ("torch::autograd::AccumulateGrad",)),
        ("x.sum(dim=0)", "SumBackward1", ("torch::autograd::AccumulateGrad",)),
        ("2 * x", "MulBackward0", ("torch::autograd::AccumulateGrad", None)),
    ],
)
def test_named_nodes_from_the_notes(text, root, inputs):
    built = build(parse(text), leaves())
    node = built.output.grad_fn
    assert node.name() == root
    assert tuple(None if f is None else f.name() for f, _ in node.next_functions) == inputs


def test_each_node_carries_the_span_of_its_source():
    program = parse("h = x * 2\nh.exp().sum()")
    built = build(program, leaves())
    total = built.output.grad_fn
    exp = total.next_functions[0][0]
    mul = exp.next_functions[0][0]
    assert total.metadata[SPAN_KEY] == Span(2, 0, 2, 13)
    assert exp.metadata[SPAN_KEY] == Span(2, 0, 2, 7)
    assert mul.metadata[SPAN_KEY] == Span(1, 4, 1, 9)
    assert [name for name, _ in built.bindings] == ["h"]
    assert built.bindings[0][1].grad_fn is mul


def test_library_calls_expand_into_torch_ops():
    ours, theirs = leaves(), leaves()
    built = build(parse("swish(x, beta=1.5)"), ours)
    x = theirs["x"]
    expected = x * torch.sigmoid(1.5 * x)
    names = {id(v): k for k, v in ours.items()}
    names_theirs = {id(v): k for k, v in theirs.items()}
    assert graph_signature(built.output, names) == graph_signature(expected, names_theirs)
    torch.testing.assert_close(built.output, expected, rtol=0, atol=0)


def test_a_20000_term_sum_builds_and_is_right():
    x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    built = build(parse("+".join(["x"] * 20_000)), {"x": x})
    assert built.output.item() == 10_000.0
    built.output.backward()
    assert x.grad.item() == 20_000.0


def test_a_20000_statement_program_from_a_file_builds(tmp_path):
    from gradcli.cli.app import read_expression

    path = tmp_path / "long.gc"
    path.write_text("h = x\n" + "h = h * 0.5 + x\n" * 20_000 + "h.sum()\n", encoding="utf-8")
    x = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    built = build(parse(read_expression(f"@{path}")), {"x": x})
    # h_k = x (2 - 2^-k) -> 2x; the sum of 2x is 2 * (1 - 2) = -2
    torch.testing.assert_close(built.output, torch.tensor(-2.0, dtype=torch.float64), rtol=1e-12, atol=0)
    assert len(built.bindings) == 20_001
    built.output.backward()
    torch.testing.assert_close(x.grad, torch.full((2,), 2.0, dtype=torch.float64), rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("9**9**9**9", LimitError, "the constant 9 ** 387420489 is larger than 1e+300"),
        ("x * 9**9**9", LimitError, "is larger than 1e+300"),
        ("x + 10.0**400", LimitError, "is larger than 1e+300"),
        ("x + 1e300 * 1e300", LimitError, "the constant overflows a float64"),
        ("x + pi**pi**pi**pi", LimitError, "is larger than 1e+300"),
        ("x + 1/0", ArgumentError, "division by zero in a constant"),
        ("x + 0**-1", ArgumentError, "division by zero in a constant"),
        ("x + (-8)**(1/3)", ArgumentError, "not a real number"),
        ("2 @ 3", ShapeError, "'@' needs tensors"),
    ],
)
def test_constant_arithmetic_is_bounded(text, kind, message):
    with pytest.raises(kind) as info:
        build(parse(text), leaves())
    assert message in info.value.message


def test_constant_arithmetic_is_exact_where_it_fits():
    built = build(parse("x * (2**-1 + 3**2 - 10/4)"), leaves())
    x = leaves()["x"]
    torch.testing.assert_close(built.output, x * 7.0, rtol=0, atol=0)


def test_plain_numbers_become_tensors_of_the_leaves_dtype_where_torch_needs_one():
    x = torch.tensor(1.0, dtype=torch.float32, requires_grad=True)
    assert build(parse("exp(2) * x"), {"x": x}).output.dtype == torch.float32
    x64 = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    out = build(parse("exp(2) * x"), {"x": x64}).output
    assert out.dtype == torch.float64
    assert out.item() == pytest.approx(math.exp(2), rel=1e-15)


@pytest.mark.parametrize(
    ("text", "receiver", "method"), [("(2).pow(x)", 2.0, "pow"), ("(2.0).maximum(x)", 2.0, "maximum")]
)
def test_a_number_receiver_of_a_method_becomes_a_tensor(text, receiver, method):
    # Python numbers have no such methods: (2).pow(x) once raised AttributeError in the builder.
    x = torch.tensor([0.5, 3.0], dtype=torch.float64, requires_grad=True)
    out = build(parse(text), {"x": x}).output
    expected = getattr(torch.tensor(receiver, dtype=torch.float64), method)(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert out.grad_fn.name() == expected.grad_fn.name()


@pytest.mark.parametrize(
    ("text", "shapes", "message"),
    [
        ("x + y", {"x": (3,), "y": (4,)}, "shapes [3] and [4] cannot be broadcast together"),
        ("maximum(x, y)", {"x": (2, 3), "y": (2,)}, "cannot be broadcast together"),
        ("where(x > 0, x, y)", {"x": (3,), "y": (2,)}, "cannot be broadcast together"),
        ("x @ y", {"x": (2, 3), "y": (2, 3)}, "cannot matmul shapes [2, 3] and [2, 3]"),
        ("matmul(x, y)", {"x": (2, 3), "y": (4,)}, "cannot matmul shapes [2, 3] and [4]"),
        ("sum(x, dim=2)", {"x": (2, 3)}, "Dimension out of range"),
        ("softmax(x, dim=(0, 1))", {"x": (2, 3)}, "torch refused 'softmax'"),
    ],
)
def test_shape_errors_point_at_the_operation(text, shapes, message):
    values = {k: torch.zeros(s, dtype=torch.float64, requires_grad=True) for k, s in shapes.items()}
    with pytest.raises(ShapeError) as info:
        build(parse(text), values)
    assert message in info.value.message
    assert info.value.span is not None
    assert "^" in info.value.render()


@pytest.mark.parametrize(
    ("text", "shapes"),
    [
        ("x * y", {"x": (20, 1), "y": (1, 20)}),
        ("x - y", {"x": (20, 1), "y": (20,)}),
        ("maximum(x, y)", {"x": (20, 1), "y": (1, 20)}),
        ("where(x > y, x, y)", {"x": (20, 1), "y": (1, 20)}),
        ("x @ y", {"x": (20, 1), "y": (1, 20)}),
        ("matmul(x, y)", {"x": (20, 1), "y": (1, 20)}),
        ("swish(x, beta=1) * y", {"x": (20, 1), "y": (1, 20)}),
    ],
)
def test_broadcasts_beyond_the_element_limit_are_refused_before_allocating(text, shapes, monkeypatch):
    monkeypatch.setattr(limits, "MAX_ELEMENTS", 399)
    values = {k: torch.zeros(s, dtype=torch.float64, requires_grad=True) for k, s in shapes.items()}
    calls = []
    real = torch.Tensor.__mul__
    monkeypatch.setattr(torch.Tensor, "__mul__", lambda a, b: calls.append(1) or real(a, b))
    with pytest.raises(LimitError) as info:
        build(parse(text), values)
    assert "the result would have 400 elements (shape [20, 20]); the limit is 399" in info.value.message
    if text == "x * y":
        assert calls == []  # refused before torch was asked


def test_the_real_element_limit_refuses_a_10_billion_element_broadcast():
    x = torch.zeros(100_000, 1, dtype=torch.float64, requires_grad=True)
    y = torch.zeros(1, 100_000, dtype=torch.float64, requires_grad=True)
    with pytest.raises(LimitError) as info:
        build(parse("x * y"), {"x": x, "y": y})
    assert "10,000,000,000 elements" in info.value.message


def test_a_missing_variable_is_named():
    with pytest.raises(UnknownNameError) as info:
        build(parse("x + y"), {"x": torch.tensor(1.0, requires_grad=True)})
    assert info.value.message == "no value for the variable 'y'"
    assert info.value.hint == "give one with --var y=..."


def test_errors_inside_a_library_body_point_at_the_call():
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    y = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ShapeError) as info:
        build(parse("y + swish(x, beta=1) * y"), {"x": x, "y": y})
    assert info.value.message.startswith("in swish(...): ") or "cannot be broadcast" in info.value.message
    assert info.value.span is not None
