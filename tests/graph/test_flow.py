"""Node hooks record the gradient entering and leaving every node; the origin of a nan/inf."""

from __future__ import annotations

import json
import math

import torch

from gradcli import trace
from gradcli.graph.flow import FlowRecorder
from gradcli.graph.walk import leaf_ids, walk_graph


def test_flow_records_gradients_in_running_order():
    result = trace("x.pow(2).sum()", ["x=[1.0, 2.0]"], flow=True)
    steps = [(s.node, s.grad_outputs, s.grad_inputs) for s in result.flow]
    # d/dx sum(x^2): 1 enters SumBackward0, ones leave it; 2x leaves PowBackward0.
    assert steps == [
        ("n0", [1.0], [[1.0, 1.0]]),
        ("n1", [[1.0, 1.0]], [[2.0, 4.0]]),
        ("n2", [[2.0, 4.0]], []),
    ]
    assert result.nonfinite_origin is None
    assert result.problems == []


def test_sqrt_at_zero_is_the_origin():
    result = trace("sqrt(x).sum()", ["x=[0.0, 1.0]"], flow=True)
    names = {n.id: n.name for n in result.graph.nodes}
    assert names[result.nonfinite_origin] == "SqrtBackward0"
    sqrt_step = next(s for s in result.flow if s.node == result.nonfinite_origin)
    assert sqrt_step.grad_inputs == [[math.inf, 0.5]]
    assert result.leaves[0].grad == [math.inf, 0.5]


def test_origin_is_where_the_nan_is_made_not_where_it_is_seen():
    # d/dx (sqrt(x) * 0) at 0: MulBackward0 passes on zeros; SqrtBackward0 makes 0 * inf = nan.
    result = trace("(sqrt(x)*0).sum()", ["x=[0.0, 4.0]"], flow=True)
    names = {n.id: n.name for n in result.graph.nodes}
    mul = next(s for s in result.flow if names[s.node] == "MulBackward0")
    assert mul.grad_inputs[0] == [0.0, 0.0] and not mul.nonfinite
    assert names[result.nonfinite_origin] == "SqrtBackward0"
    assert math.isnan(result.leaves[0].grad[0]) and result.leaves[0].grad[1] == 0.0


def test_log_at_zero_origin_in_a_longer_graph():
    result = trace("h = log(x); (h*h).sum() + x.sum()", ["x=[0.0, 1.0]"], flow=True)
    names = {n.id: n.name for n in result.graph.nodes}
    # h*h at x=0 is (-inf)^2: its backward 2h is already -inf.
    assert names[result.nonfinite_origin] == "MulBackward0"


def test_hooks_fire_each_pass_and_are_removed_afterwards():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out = (x * 3).sum()
    graph = walk_graph(out.grad_fn, leaf_names=leaf_ids({"x": x}))
    recorder = FlowRecorder(graph.objects)
    with recorder:
        out.backward(retain_graph=True)
        recorder.start_pass(1)
        out.backward(retain_graph=True)
    assert [(s.node, s.pass_index) for s in recorder.steps] == [
        ("n0", 0), ("n1", 0), ("n2", 0), ("n0", 1), ("n1", 1), ("n2", 1),
    ]
    count = len(recorder.steps)
    out.backward()
    assert len(recorder.steps) == count  # removed: a third pass records nothing
    assert x.grad.tolist() == [9.0, 9.0]  # hooks returned None: gradients untouched


def test_flow_json_has_pass_index_and_origin(cli):
    result = cli("trace", "sqrt(x).sum()", "--var", "x=[0.0, 1.0]", "--flow", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    origin = document["nonfinite_origin"]
    assert next(n["name"] for n in document["nodes"] if n["id"] == origin) == "SqrtBackward0"
    step = next(s for s in document["flow"] if s["node"] == origin)
    assert step == {"node": origin, "pass": 0, "grad_inputs": [["inf", 0.5]], "grad_outputs": [[1.0, 1.0]], "nonfinite": True}


def test_flow_console_marks_the_origin(cli):
    result = cli("trace", "sqrt(x).sum()", "--var", "x=[0.0, 1.0]", "--flow")
    assert result.exit_code == 1
    line = next(line for line in result.stdout.splitlines() if "SqrtBackward0" in line and "ORIGIN" in line)
    assert "n1" in line
    assert "grad in: [[1.0, 1.0]]  out: [[inf, 0.5]]" in result.stdout
    assert "origin of the first non-finite gradient: n1 SqrtBackward0" in result.stdout
