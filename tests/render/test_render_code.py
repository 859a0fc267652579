"""render/code.py: the per-module gradient norms of a model's trace."""

from __future__ import annotations

import math

import pytest
import torch


def test_a_gradient_beyond_the_square_range_gives_its_norm_not_a_traceback(cli):
    # Linear(3, 2) on one row of 1e160: the weight's gradient is that row twice (six values
    # of 1e160), the bias's is (1, 1); their squares overflow float64, their norm does not.
    result = cli("trace", "torch.nn:Linear", "--init", "in_features=3", "--init", "out_features=2",
                 "--var", "input=[[1e160, 1e160, 1e160]]", "--dtype", "float64", "--loss", "out.sum()")
    assert result.exit_code == 0, result.stdout
    model = torch.nn.Linear(3, 2).double()
    model(torch.full((1, 3), 1e160, dtype=torch.float64)).sum().backward()
    norm = math.hypot(*model.weight.grad.flatten().tolist(), *model.bias.grad.tolist())
    assert norm == pytest.approx(math.sqrt(6) * 1e160, rel=1e-15)
    assert "(root): 2 parameters, gradient norm 2.449e+160" in result.stdout


def test_parameters_without_a_gradient_get_no_norm_of_zero(cli):
    # --mode grad --wrt the input leaves every .grad None: "gradient norm 0.0" read as ZERO.
    result = cli("trace", "torch.nn:Linear", "--init", "in_features=3", "--init", "out_features=2",
                 "--var", "input=[[1.0, 2.0, 3.0]]", "--loss", "out.sum()", "--mode", "grad", "--wrt", "input")
    assert result.exit_code == 0, result.stdout
    assert "  (root): 2 parameters; .grad is None for weight, bias\n" in result.stdout
    assert "gradient norm" not in result.stdout
    both = cli("trace", "torch.nn:Linear", "--init", "in_features=3", "--init", "out_features=2",
               "--var", "input=[[1.0, 2.0, 3.0]]", "--loss", "out.sum()")
    assert "  (root): 2 parameters, gradient norm 5.477\n" in both.stdout  # hypot(1, 2, 3, 1, 2, 3, 1, 1)


def test_a_folded_module_of_one_node_says_one_node(cli):
    # residual_mlp's block.act (a ReLU) made one node: it read "1 nodes".
    result = cli("trace", "examples/residual_mlp.py:ResidualMLP", "--var", "x=randn(4,4)", "--loss", "out.pow(2).mean()",
                 "--seed", "0")
    assert result.exit_code == 1
    assert "  ▸ block.act (ReLU)  1 node, 0 parameters, in [4, 8] → out [4, 8]" in result.stdout


def test_mode_grad_on_code_shows_the_returned_gradients_under_gradients(cli):
    # As for an expression: what autograd.grad returned stands beside the .grad it left None.
    result = cli("trace", "torch.nn:Linear", "--init", "in_features=3", "--init", "out_features=2",
                 "--var", "input=[[1.0, 2.0, 3.0]]", "--loss", "out.sum()", "--mode", "grad", "--wrt", "weight")
    assert result.exit_code == 0, result.stdout
    gradients = result.stdout.split("\nGradients\n")[1]
    assert "  d(output)/dweight: [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]\n" in gradients  # out.sum() = sum_ij w_ij x_j + b
    assert "  (root): 2 parameters; .grad is None for weight, bias\n" in gradients
