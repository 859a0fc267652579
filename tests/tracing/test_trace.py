"""`gradcli.trace` (the library API): passes, gradients against hand-derived values, errors."""

from __future__ import annotations

import math

import pytest
import torch

from gradcli import trace
from gradcli.errors import GradcliError, UsageError
from gradcli.words import problem_sentences


def test_backward_fills_leaf_grad_with_2x():
    result = trace("x.pow(2).sum()", ["x=randn(3,3)"], seed=0)
    x = torch.tensor(result.leaves[0].value)
    assert torch.allclose(torch.tensor(result.leaves[0].grad), 2 * x, rtol=0, atol=1e-12)
    assert result.seed == 0
    assert [n.name for n in result.graph.nodes] == ["SumBackward0", "PowBackward0", "torch::autograd::AccumulateGrad"]
    assert result.problems == []


def test_inputs_given_as_a_dict_are_the_same_as_var_texts():
    """gradcli.trace(text, {"x": 0.5}) as check takes it; not the dict's keys read as --var texts."""
    by_dict = trace("x * sin(x)", {"x": 0.5})
    x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    (x * torch.sin(x)).backward()
    assert by_dict.leaves[0].grad == pytest.approx(x.grad.item(), rel=0, abs=1e-15)
    assert by_dict.leaves[0].grad == trace("x * sin(x)", ["x=0.5"]).leaves[0].grad
    with pytest.raises(GradcliError, match="given twice"):
        trace("x * sin(x)", {"x": 0.5}, ["x=1.0"])


def test_same_seed_same_values():
    first = trace("x.sum()", ["x=randn(4)"], seed=7)
    again = trace("x.sum()", ["x=randn(4)"], seed=7)
    assert first.leaves[0].value == again.leaves[0].value


def test_second_pass_without_retain_graph_fails_with_torchs_message():
    result = trace("x.pow(2).sum()", ["x=[1.0, 2.0]"], repeat=2)
    first, second = result.passes
    assert first.error is None and first.grads == {"x": [2.0, 4.0]}
    assert second.error.type == "RuntimeError"
    assert second.error.message.startswith("Trying to backward through the graph a second time")
    assert second.error.fix == "--retain-graph"
    assert "freed" in second.error.explanation
    assert result.problems and problem_sentences(result.problems)[0].startswith("pass 2: RuntimeError")


def test_a_failed_pass_stops_the_run():
    result = trace("x.pow(2).sum()", ["x=[1.0, 2.0]"], repeat=4)
    assert len(result.passes) == 2 and result.skipped_passes == 2


def test_retain_graph_accumulates_pass_two_is_twice_pass_one():
    result = trace("x.pow(2).sum()", ["x=[1.0, 2.0]"], repeat=3, retain_graph=True)
    assert [p.grads["x"] for p in result.passes] == [[2.0, 4.0], [4.0, 8.0], [6.0, 12.0]]
    assert all(p.retain_graph for p in result.passes)
    assert result.leaves[0].grad == [6.0, 12.0]


def test_zero_grad_between_passes():
    result = trace("x.pow(2).sum()", ["x=[1.0, 2.0]"], repeat=2, retain_graph=True, zero_grad=True)
    assert [p.grads["x"] for p in result.passes] == [[2.0, 4.0], [2.0, 4.0]]


def test_mode_grad_returns_gradients_and_leaves_grad_none():
    result = trace("(x*y).sum()", ["x=[1.0, 2.0]", "y=[3.0, 5.0]"], mode="grad", wrt=["x"])
    assert result.passes[0].grads == {"x": [3.0, 5.0]}
    assert [leaf.grad for leaf in result.leaves] == [None, None]


def test_mode_grad_with_respect_to_an_intermediate():
    result = trace("h = x*x; (h*3).sum()", ["x=[1.0, 2.0]"], mode="grad", wrt=["h"])
    assert result.passes[0].grads == {"h": [3.0, 3.0]}


def test_backward_wrt_restricts_inputs():
    result = trace("(x*y).sum()", ["x=[1.0, 2.0]", "y=[3.0, 5.0]"], wrt=["y"])
    assert result.leaves[0].grad is None and result.leaves[1].grad == [1.0, 2.0]


def test_backward_wrt_an_intermediate_writes_its_grad():
    result = trace("h = x*x; (h*3).sum()", ["x=[1.0, 2.0]"], wrt=["h"])
    assert result.passes[0].grads["h"] == [3.0, 3.0]
    (h,) = result.intermediates
    assert h.retained and h.grad == [3.0, 3.0] and "inputs=" in h.note
    assert result.leaves[0].grad is None


def test_create_graph_gradient_has_a_graph_and_the_second_derivative_is_6x():
    result = trace("(x**3).sum()", ["x=[1.0, 2.0, -0.5]"], create_graph=True)
    assert result.leaves[0].grad == [3.0, 12.0, 0.75]  # 3x^2
    assert result.passes[0].grad_fns["x"] is not None
    (gradient,) = result.gradient_graphs
    assert gradient.of == "x"
    assert "PowBackward0" in [n.name for n in gradient.graph.nodes]
    assert gradient.second == [6.0, 12.0, -3.0]  # 6x
    assert any(n.same_as == "n2" for n in gradient.graph.nodes)  # x's AccumulateGrad, shared


def test_create_graph_in_grad_mode():
    result = trace("sin(x).sum()", ["x=[0.5, 1.0]"], mode="grad", create_graph=True)
    (gradient,) = result.gradient_graphs
    assert result.passes[0].grads["x"] == pytest.approx([math.cos(0.5), math.cos(1.0)], abs=1e-15)
    assert gradient.second == pytest.approx([-math.sin(0.5), -math.sin(1.0)], abs=1e-15)
    assert result.leaves[0].grad is None


def test_create_graph_of_a_linear_function_has_no_second_graph():
    result = trace("(x*2).sum()", ["x=[1.0]"], mode="grad", create_graph=True)
    (gradient,) = result.gradient_graphs
    assert gradient.graph.nodes == [] and gradient.second is None
    assert "no grad_fn" in gradient.note


def test_doubling_program_gradient_matches_the_chain_rule():
    result = trace("h = x*x + x; h = h*h + h; h.sum()", ["x=[0.5, -2.0]"])
    expected = []
    for x in (0.5, -2.0):
        h1 = x * x + x
        expected.append((2 * h1 + 1) * (2 * x + 1))
    assert result.leaves[0].grad == pytest.approx(expected, rel=1e-15)


def test_grad_output_weights_the_starting_gradient():
    result = trace("x*x", ["x=[1.0, 2.0]"], grad_output="[1.0, 10.0]")
    assert result.leaves[0].grad == [2.0, 40.0]
    ones = trace("x*x", ["x=[1.0, 2.0]"], grad_output="ones")
    assert ones.leaves[0].grad == [2.0, 4.0]


def test_non_scalar_output_without_grad_output_is_refused():
    with pytest.raises(UsageError) as caught:
        trace("x*x", ["x=[1.0, 2.0]"])
    assert "--grad-output ones" in caught.value.render()
    assert "shape [2]" in caught.value.message


def test_grad_output_of_the_wrong_shape_is_refused():
    with pytest.raises(UsageError, match=r"has shape \[3\] but the output has shape \[2\]"):
        trace("x*x", ["x=[1.0, 2.0]"], grad_output="ones(3)")


def test_retain_grad_keeps_an_intermediates_grad():
    result = trace("h = x*x; (h*3).sum()", ["x=[1.0, 2.0]"], retain_grad=["h"])
    (h,) = result.intermediates
    assert h.retained and h.grad == [3.0, 3.0] and h.node == "n2" and h.note == "kept by --retain-grad"
    plain = trace("h = x*x; (h*3).sum()", ["x=[1.0, 2.0]"])
    assert plain.intermediates[0].grad is None
    assert "--retain-grad h" in plain.intermediates[0].note and "not a leaf" in plain.intermediates[0].note


@pytest.mark.parametrize("option", ["retain_grad", "wrt"])
def test_unknown_names_are_refused(option):
    with pytest.raises(UsageError, match="'nope' is not"):
        trace("x.sum()", ["x=[1.0]"], **{option: ["nope"]})


def test_unused_wrt_is_an_autograd_error_with_an_explanation():
    result = trace("h = y*2; x.sum()", ["x=[1.0]", "y=[2.0]"], mode="grad", wrt=["y"])
    error = result.passes[0].error
    assert "appears to not have been used in the graph" in error.message
    assert error.fix == "drop that name from --wrt"


def test_default_variables_are_reported():
    result = trace("x*y", [], grad_output="ones")
    assert [(leaf.name, leaf.spec, leaf.defaulted) for leaf in result.leaves] == [("x", "0.5", True), ("y", "1.5", True)]
    assert result.leaves[0].grad == 1.5


def test_a_constant_output_has_no_graph():
    with pytest.raises(GradcliError, match="plain number"):
        trace("2*3")


def test_a_leaf_output_has_no_nodes_but_a_gradient():
    result = trace("x", ["x=2.0"])
    assert result.graph.nodes == [] and result.leaves[0].grad == 1.0


def test_nonfinite_gradient_is_a_problem_without_flow():
    result = trace("sqrt(x).sum()", ["x=[0.0, 1.0]"])
    assert result.passes[0].nonfinite == ["x"]
    assert problem_sentences(result.problems) == ["pass 1: the gradient of x is not finite"]


@pytest.mark.parametrize("repeat", [0, 1001])
def test_repeat_is_bounded(repeat):
    with pytest.raises(GradcliError):
        trace("x.sum()", ["x=[1.0]"], repeat=repeat)
