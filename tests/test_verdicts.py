"""How a verdict is assembled (issue 18, section 1): agreement in float64 is not proof,
kinks are judged per element, the domain is decided in exact arithmetic, and == / != work.

Every case failed before its fix; truths are recomputed here with mpmath (50 digits) or
torch directly, never with gradcli.
"""

from __future__ import annotations

import mpmath
import torch

import gradcli


def test_a_cancellation_both_float64_sides_share_is_caught():
    # d/dx 1e20*(sqrt(x**2+1) - x) at 1e8: autograd and the float64 formula both give 0.
    with mpmath.workdps(50):
        x = mpmath.mpf(10) ** 8
        truth = float(10**20 * (x / mpmath.sqrt(x**2 + 1) - 1))
    assert round(truth) == -5000
    xt = torch.tensor([1e8], dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(1e20 * (torch.sqrt(xt**2 + 1) - xt), xt)
    assert auto.item() == 0.0  # what autograd really gives
    result = gradcli.check("1e20*(sqrt(x**2+1) - x)", {"x": "[1e8, 1.0]"})
    assert not result.ok
    comparison = result.variables[0]
    assert comparison.wrong == 1 and comparison.sampled_exact >= 1
    assert comparison.worst_at["exact"] == truth


def test_agreeing_points_are_sampled_by_seed_and_bounded():
    first = gradcli.check("sin(x)", points=5000, seed=3).variables[0]
    again = gradcli.check("sin(x)", points=5000, seed=3).variables[0]
    assert first.ok and first.sampled_exact == again.sampled_exact
    assert 8 <= first.sampled_exact <= 200 + 2000
