"""The walked graph is the graph torch has: same nodes, same edges (None included), once each.

Each case pairs a gradcli expression with the same computation written as PyTorch code; the
reference walk below is a separate, recursive implementation over `next_functions` (the
graphs here are small), and `trace --json` must list exactly its nodes in its order.
"""

from __future__ import annotations

import json

import pytest
import torch

from gradcli import parse
from gradcli.graph.walk import ACCUMULATE_GRAD, Labels, leaf_ids, saved_values, walk_graph

X = [[0.5, -1.25], [2.0, 0.75]]
Y = [[1.5, 0.25], [-0.5, 3.0]]
VALUES = {"x": X, "y": Y}


def var_options(expression):
    return [f"--var={name}={VALUES[name]}" for name in parse(expression).variables]

CASES = [
    ("x.pow(2).sum()", lambda x, y: x.pow(2).sum()),
    ("(x*y).sum()", lambda x, y: (x * y).sum()),
    ("(x*2 + 1).sum()", lambda x, y: (x * 2 + 1).sum()),
    ("(x/y).sum()", lambda x, y: (x / y).sum()),
    ("(abs(x)**y).sum()", lambda x, y: (torch.abs(x) ** y).sum()),
    ("sin(x).exp().sum()", lambda x, y: torch.sin(x).exp().sum()),
    ("h = x*x; h = h*h + h; h.sum()", lambda x, y: (lambda h: (h * h + h).sum())(x * x)),
    ("(x @ y).sum()", lambda x, y: (x @ y).sum()),
    ("softmax(x, dim=0).sum()", lambda x, y: torch.softmax(x, dim=0).sum()),
    ("logsumexp(x, dim=1).sum()", lambda x, y: torch.logsumexp(x, dim=1).sum()),
    ("where(x > 0, x, y*2).sum()", lambda x, y: torch.where(x > 0, x, y * 2).sum()),
    ("sigmoid(x).mean()", lambda x, y: torch.sigmoid(x).mean()),
    ("tanh(x).sum() * y.sum()", lambda x, y: torch.tanh(x).sum() * y.sum()),
    ("sqrt(abs(x) + 1).sum()", lambda x, y: torch.sqrt(torch.abs(x) + 1).sum()),
    ("clamp(x, -0.5, 0.5).sum()", lambda x, y: torch.clamp(x, -0.5, 0.5).sum()),
    ("maximum(x, y).sum()", lambda x, y: torch.maximum(x, y).sum()),
    ("(-x).sum()", lambda x, y: (-x).sum()),
    ("log(x*x + 1).prod()", lambda x, y: torch.log(x * x + 1).prod()),
    ("swish(x).sum()", lambda x, y: (x * torch.sigmoid(1.0 * x)).sum()),
    ("(x - y).pow(2).mean() + relu(y).sum()", lambda x, y: (x - y).pow(2).mean() + torch.relu(y).sum()),
]


def reference_walk(root):
    """Depth-first pre-order over next_functions, each node once (recursive: small graphs)."""
    order, seen = [], {}

    def visit(fn):
        if id(fn) in seen:
            return
        seen[id(fn)] = len(order)
        order.append(fn)
        for child, _ in fn.next_functions:
            if child is not None:
                visit(child)

    visit(root)
    return order, seen


def torch_graph(fn):
    x = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    y = torch.tensor(Y, dtype=torch.float64, requires_grad=True)
    out = fn(x, y)
    order, index = reference_walk(out.grad_fn)
    names = {id(x): "x", id(y): "y"}
    expected = [
        {
            "name": node.name(),
            "next": [None if c is None else f"n{index[id(c)]}" for c, _ in node.next_functions],
            "variable": names[id(node.variable)] if hasattr(node, "variable") else None,
        }
        for node in order
    ]
    return expected, out


@pytest.mark.parametrize("expression, fn", CASES, ids=[c[0] for c in CASES])
def test_json_graph_is_torchs_graph(cli, expression, fn):
    result = cli("trace", expression, *var_options(expression), "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    expected, out = torch_graph(fn)
    got = [{"name": n["name"], "next": n["next"], "variable": n["variable"]} for n in document["nodes"]]
    assert got == expected
    assert [n["id"] for n in document["nodes"]] == [f"n{i}" for i in range(len(expected))]
    assert document["root"] == "n0"
    assert document["result"]["value"] == pytest.approx(out.item(), rel=1e-12)


def test_saved_attributes_tensors_and_scalars():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    out = x.pow(3).sum()
    graph = walk_graph(out.grad_fn, leaf_names=leaf_ids({"x": x}))
    pow_node = graph.nodes[1]
    assert pow_node.name == "PowBackward0"
    assert pow_node.saved["_saved_exponent"] == 3
    assert pow_node.saved["_saved_self"] == {
        "shape": [3], "dtype": "float32", "numel": 3, "preview": [1.0, 2.0, 3.0], "variable": "x",
    }
    assert graph.nodes[0].saved == {"_saved_self_sym_sizes": [3]}
    assert graph.nodes[2].name == ACCUMULATE_GRAD and graph.nodes[2].variable == "x"


def test_saved_tensor_read_after_free_is_reported_not_raised():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out = x.exp().sum()
    exp_node = out.grad_fn.next_functions[0][0]
    out.backward()
    saved = saved_values(exp_node)
    assert set(saved) == {"_saved_result"}
    assert "backward through the graph a second time" in saved["_saved_result"]["freed"]


def test_labels_name_the_nodes_assigned_names_bound():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    g = h
    out = (h.exp() + 1).sum()
    graph = walk_graph(out.grad_fn, leaf_names=leaf_ids({"x": x}), labels=Labels([("h", h), ("g", g), ("k", x)]))
    labelled = {n.name: n.label for n in graph.nodes if n.label}
    assert labelled == {"MulBackward0": "h, g"}
    exp_node = next(n for n in graph.nodes if n.name == "ExpBackward0")
    assert "bound" not in exp_node.saved.get("_saved_result", {})


def test_doubling_dag_has_linear_nodes_not_exponential_paths():
    # 40 levels: 2^40 paths from the output to x, but 2 nodes per level.
    x = torch.tensor(0.01, dtype=torch.float64, requires_grad=True)
    h = x
    for _ in range(40):
        h = h * h + h
    graph = walk_graph(h.grad_fn, leaf_names=leaf_ids({"x": x}))
    assert len(graph.nodes) == 2 * 40 + 1
    assert sorted({n.name for n in graph.nodes}) == ["AddBackward0", "MulBackward0", ACCUMULATE_GRAD]
    assert sum(len(n.next) for n in graph.nodes) == 4 * 40
    assert len({n.id for n in graph.nodes}) == len(graph.nodes)


def test_chain_deeper_than_the_recursion_limit_walks_iteratively():
    x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    h = x
    for _ in range(5000):
        h = h.sin()
    graph = walk_graph(h.grad_fn, leaf_names=leaf_ids({"x": x}))
    assert len(graph.nodes) == 5001
    assert graph.nodes[-1].variable == "x"
    assert all(n.next == [f"n{i + 1}"] for i, n in enumerate(graph.nodes[:-1]))


def test_no_graph_for_a_leaf_output():
    graph = walk_graph(None)
    assert graph.root is None and graph.nodes == []


def test_spans_point_at_the_source(cli):
    result = cli("trace", "h = x*x; h.exp().sum()", "--var", "x=[1.0]", "--json")
    nodes = json.loads(result.stdout)["nodes"]
    mul = next(n for n in nodes if n["name"] == "MulBackward0")
    assert mul["label"] == "h"
    assert mul["span"] == {"line": 1, "col": 4, "end_line": 1, "end_col": 7}
