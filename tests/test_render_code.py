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
