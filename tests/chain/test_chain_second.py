"""trace --symbolic --create-graph: the gradient's own graph written out node by node. For
each program the second derivative composed along that graph equals sympy's second
derivative of the expression (written here by hand in sympy) and torch's double backward
(computed here with torch.autograd.grad), and every node's and edge's formula, at the traced
values, equals what hooks saw while sum(gradient) was backpropagated through the graph."""

from __future__ import annotations

import json

import pytest
import sympy as sp
import torch
from typer.testing import CliRunner

from gradcli.cli.app import app
from gradcli.tracing.trace import trace
from gradcli.chain.backward_ops import BACKWARD_OPS
from paths import ROOT

x_ = sp.Symbol("x", real=True)


def _squared_plus(h):
    """h*h + h: the shared node h reached by three paths."""
    return h * h + h


# (program, --var texts, the same program in torch, sympy's meaning per element, variables)
PROGRAMS = [
    ("(x**3).sum()", ["x=[0.5, 2.0]"], lambda x: (x**3).sum(), x_**3),
    ("h = x*sigmoid(x); y = h*h + h; y.sum()", ["x=[0.5, 2.0]"],
     lambda x: _squared_plus(x * torch.sigmoid(x)).sum(), _squared_plus(x_ / (1 + sp.exp(-x_)))),
    ("(x*sigmoid(x)).sum()", ["x=[-1.0, 0.5]"], lambda x: (x * torch.sigmoid(x)).sum(), x_ / (1 + sp.exp(-x_))),
    ("(sin(x)*exp(x)).sum()", ["x=[0.5, 2.0]"], lambda x: (torch.sin(x) * torch.exp(x)).sum(), sp.sin(x_) * sp.exp(x_)),
    ("h = x*x; (h*h + h).sum()", ["x=[0.5, 2.0]"], lambda x: _squared_plus(x * x).sum(), x_**4 + x_**2),
    ("where(x > 1, x**2, tanh(x)).sum()", ["x=[0.5, 2.0]"],
     lambda x: torch.where(x > 1, x**2, torch.tanh(x)).sum(), sp.Piecewise((x_**2, x_ > 1), (sp.tanh(x_), True))),
    ("(x**2).mean()", ["x=[0.5, 2.0]"], lambda x: (x**2).mean(), x_**2 / 2),  # per element: mean over 2
    ("(exp(x)/x - log(x)).sum()", ["x=[0.5, 2.0]"], lambda x: (torch.exp(x) / x - torch.log(x)).sum(),
     sp.exp(x_) / x_ - sp.log(x_)),
    ("(tanh(x)*x - 2*x).sum()", ["x=[0.3, -1.2]"], lambda x: (torch.tanh(x) * x - 2 * x).sum(), sp.tanh(x_) * x_ - 2 * x_),
]


def _values(texts):
    return [float(v) for v in texts[0].split("=", 1)[1].strip("[]").split(",")]


@pytest.mark.parametrize(("expression", "variables", "in_torch", "meaning"), PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_second_derivative_along_the_gradients_graph_is_sympys_and_torchs(expression, variables, in_torch, meaning):
    result = trace(expression, variables, symbolic=True, create_graph=True, dtype="float64")
    assert result.problems == []
    (graph,) = result.symbolic.second_graphs
    assert graph.of == "x" and graph.note is None
    (leaf,) = graph.leaves
    assert leaf.proof in ("simplify", "numeric")
    x = torch.tensor(_values(variables), dtype=torch.float64, requires_grad=True)
    (first,) = torch.autograd.grad(in_torch(x), [x], create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), [x])
    assert torch.allclose(torch.tensor(leaf.numbers.value, dtype=torch.float64), second, rtol=1e-9, atol=1e-12)
    assert leaf.numbers.agrees is True
    by_sympy = sp.lambdify(x_, sp.diff(meaning, x_, 2), "math")
    for got, at in zip(leaf.numbers.value, x.tolist()):
        assert got == pytest.approx(by_sympy(at), rel=1e-9, abs=1e-12)
    for node in graph.nodes:
        assert node.numbers.agrees is True, node.name
        assert node.edges == [] or all(e.numbers.agrees is True for e in node.edges), node.name


def test_a_mixed_partial_reaches_the_other_variable():
    result = trace("(x*x*y + sin(y)).sum()", ["x=[0.5, 2.0]", "y=[1.5, -1.0]"], symbolic=True, create_graph=True)
    assert result.problems == []
    by_of = {g.of: g for g in result.symbolic.second_graphs}
    leaves_x = {leaf.variable: leaf for leaf in by_of["x"].leaves}
    leaves_y = {leaf.variable: leaf for leaf in by_of["y"].leaves}
    # d/dx sum(d/dx) = 2y, d/dy sum(d/dx) = 2x; d/dx sum(d/dy) = 2x, d/dy sum(d/dy) = -sin(y)
    assert leaves_x["x"].numbers.value == pytest.approx([3.0, -2.0])
    assert leaves_x["y"].numbers.value == pytest.approx([1.0, 4.0])
    assert leaves_y["x"].numbers.value == pytest.approx([1.0, 4.0])
    assert leaves_y["y"].numbers.value == pytest.approx([-torch.sin(torch.tensor(1.5)).item(), torch.sin(torch.tensor(1.0)).item()])
    for leaf in [*leaves_x.values(), *leaves_y.values()]:
        assert leaf.proof == "simplify" and leaf.numbers.agrees is True


def test_the_shared_node_sums_its_paths_in_the_gradients_graph():
    graph = trace("h = x*x; (h*h + h).sum()", ["x=[0.5, 2.0]"], symbolic=True, create_graph=True).symbolic.second_graphs[0]
    (h,) = [node for node in graph.nodes if node.symbol == "h"]
    assert len(h.terms) == 2 and h.numbers.value == [2.0, 8.0]
    (leaf,) = graph.leaves
    assert leaf.expanded.text == "12*x**2 + 2" and leaf.reference.text == "12*x**2 + 2"
    assert leaf.numbers.value == [5.0, 50.0]


def test_where_keeps_its_mask_as_named_constants():
    graph = trace("where(x > 1, x**2, tanh(x)).sum()", ["x=[0.5, 2.0]"], symbolic=True, create_graph=True).symbolic.second_graphs[0]
    assert sorted(c.formula.text for c in graph.constants) == ["[0.0, 1.0]", "[1.0, 0.0]"]
    assert graph.leaves[0].proof == "numeric"  # Piecewise against a mask: said so, shown numerically


def test_elements_mode_says_why_the_graph_is_not_written():
    result = trace("(softmax(x, dim=0) * x).sum()", ["x=[1.0, 2.0, 3.0]"], symbolic=True, create_graph=True)
    (graph,) = result.symbolic.second_graphs
    assert graph.nodes == [] and "one symbol stands for every element" in graph.note


def test_text_and_json_carry_the_gradients_graph():
    args = ["trace", "h = x*x; (h*h + h).sum()", "--var", "x=[0.5, 2.0]", "--symbolic", "--create-graph"]
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0
    assert "Second derivative: the graph of x's gradient, node by node" in text.output
    assert "sympy's second derivative: 12*x**2 + 2" in text.output
    document = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)
    (graph,) = document["symbolic"]["second_graphs"]
    assert graph["leaves"][0]["numbers"] == {"value": [5.0, 50.0], "torch": [5.0, 50.0], "agrees": True}
    assert {node["name"] for node in graph["nodes"]} >= {"AddBackward0", "MulBackward0"}


@pytest.mark.parametrize("name", sorted(BACKWARD_OPS))
def test_every_backward_op_row_is_torchs_own_node(name):
    """Each row's formula, at random inputs, equals the output of a torch graph node of that kind."""
    generator = torch.Generator().manual_seed(0)
    a = (torch.rand(3, generator=generator, dtype=torch.float64) + 0.5).requires_grad_()
    b = (torch.rand(3, generator=generator, dtype=torch.float64) + 0.5).requires_grad_()
    made = {
        "torch::autograd::CopyBackwards": None,
        "AddBackward0": lambda: torch.add(a, b, alpha=2),
        "SubBackward0": lambda: torch.sub(a, b, alpha=3),
        "MulBackward0": lambda: a * b, "MulBackward1": lambda: torch.autograd.grad((a**3).sum(), [a], create_graph=True)[0].grad_fn.next_functions[1][0], "DivBackward0": lambda: a / b,
        "NegBackward0": lambda: -a, "PowBackward0": lambda: a**3, "SigmoidBackward0": lambda: torch.sigmoid(a),
        "TanhBackward0": lambda: torch.tanh(a), "ExpBackward0": lambda: torch.exp(a), "LogBackward0": lambda: torch.log(a),
        "SinBackward0": lambda: torch.sin(a), "CosBackward0": lambda: torch.cos(a), "SqrtBackward0": lambda: torch.sqrt(a),
        "ReciprocalBackward0": lambda: torch.reciprocal(a),
        "SigmoidBackwardBackward0": lambda: torch.autograd.grad(torch.sigmoid(b), [b], a, create_graph=True)[0],
        "TanhBackwardBackward0": lambda: torch.autograd.grad(torch.tanh(b), [b], a, create_graph=True)[0],
    }
    # The value of the node the inputs lead to ("o"), and the node's own output.
    inner = {"torch::autograd::CopyBackwards": b, "MulBackward1": a**2, "SigmoidBackwardBackward0": torch.sigmoid(b),
             "TanhBackwardBackward0": torch.tanh(b)}.get(name, a)
    if name == "torch::autograd::CopyBackwards":
        (a * b).sum().backward(create_graph=True)
        node, out = a.grad.grad_fn, a.grad
    elif name == "MulBackward1":  # inside pow's backward: 3 * a**2
        node, out = made[name](), 3 * a**2
    else:
        out = made[name]()
        node = out.grad_fn
    assert node.name() == name
    inputs = []
    for nxt, _ in node.next_functions:  # each input's value: a leaf, or the node a's or b's op made
        if nxt is None:
            inputs.append(sp.Integer(0))
        elif hasattr(nxt, "variable"):
            inputs.append(sp.Symbol("a") if nxt.variable is a else sp.Symbol("b"))
        else:  # the gradient's graph reads sigmoid(b) / tanh(b): its output
            inputs.append(sp.Symbol("o"))
    formula = BACKWARD_OPS[name].meaning(sp, inputs, node)
    env = {"a": a.detach(), "b": b.detach(), "o": inner.detach()}
    value = sp.lambdify([sp.Symbol(k) for k in env], formula, "math")
    for i in range(3):
        assert value(*(float(v[i]) for v in env.values())) == pytest.approx(float(out[i].detach()), rel=1e-12)


def test_the_readme_shows_the_real_second_derivative_output():

    readme = (ROOT / "docs" / "commands" / "trace.md").read_text(encoding="utf-8")
    shown = readme.split("  d/dx sum(gradient of x)\n", 1)[1].split("```", 1)[0]
    runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"})
    output = runner.invoke(app, ["trace", "h = x*x; y = h*h + h; y.sum()", "--var", "x=[0.5, 2.0]", "--symbolic",
                                 "--create-graph"]).output
    assert "  d/dx sum(gradient of x)\n" + shown in output


def test_a_broadcast_scalar_gets_its_edges_summed_as_torch_does():
    result = trace("(x*y + sin(x*y)).sum()", ["x=[0.5, 2.0]", "y=1.5"], symbolic=True, create_graph=True, dtype="float64")
    assert result.problems == []
    x = torch.tensor([0.5, 2.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad((x * y + torch.sin(x * y)).sum(), [x], create_graph=True)
    xx, xy = torch.autograd.grad(gx.sum(), [x, y])
    leaves = {leaf.variable: leaf for leaf in result.symbolic.second_graphs[0].leaves}
    assert torch.allclose(torch.tensor(leaves["x"].numbers.value, dtype=torch.float64), xx, rtol=1e-12)
    assert leaves["y"].numbers.value == pytest.approx(xy.item(), rel=1e-12)  # a scalar: summed over x's elements
    assert all(node.numbers.agrees and all(e.numbers.agrees for e in node.edges) for node in result.symbolic.second_graphs[0].nodes)


def test_a_starting_gradient_is_a_named_constant_and_shown_numerically():
    result = trace("h = x*x; h.exp()", ["x=[1.0, 2.0]"], symbolic=True, create_graph=True, grad_output="[1.0, -2.0]",
                   dtype="float64")
    (graph,) = result.symbolic.second_graphs
    assert [c.formula.text for c in graph.constants] == ["[1.0, -2.0]"]
    (leaf,) = graph.leaves
    assert leaf.proof == "numeric" and "3 random points" in leaf.proof_words and leaf.numbers.agrees is True
