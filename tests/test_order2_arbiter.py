"""Finite differences do not overrule the exact derivative at order 2 either (issue 24, case 2).

`sin(x0*x1 + x1*x2 + ... + x24*x0)`: torch's gradgradcheck in fast mode fails (one random
projection of a 400-element Jacobian), while every second derivative autograd gives agrees
with sympy's Hessian evaluated at 30 digits with mpmath, here in the test.
"""

from __future__ import annotations

import warnings

import mpmath
import sympy
import torch

import gradcli

N = 25
CYCLIC = "sin(" + " + ".join(f"x{i}*x{(i + 1) % N}" for i in range(N)) + ")"


def _cyclic(*xs: torch.Tensor) -> torch.Tensor:
    return torch.sin(sum(xs[i] * xs[(i + 1) % N] for i in range(N)))


def test_a_fast_mode_projection_does_not_overrule_agreeing_exact_second_derivatives():
    result = gradcli.check(CYCLIC, order=2, points=5, seed=0)
    names = [f"x{i}" for i in range(N)]
    columns = [result.points[n] for n in names]

    # torch: gradgradcheck's fast mode fails on these very points, with the check's seed
    inputs = tuple(c.clone().requires_grad_(True) for c in columns)
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        warnings.simplefilter("ignore")
        torch.manual_seed(result.seed)
        assert torch.autograd.gradgradcheck(_cyclic, inputs, fast_mode=True, raise_exception=False) is False

    # sympy + mpmath: autograd's Hessian at every point is the exact one
    symbols = sympy.symbols(f"x0:{N}", real=True)
    hessian = sympy.lambdify(symbols, sympy.hessian(sympy.sin(sum(symbols[i] * symbols[(i + 1) % N]
                                                                 for i in range(N))), symbols),
                             modules="mpmath", cse=True)
    for row in torch.stack(columns, 1):
        with mpmath.workdps(30):
            exact = torch.tensor(hessian(*[mpmath.mpf(v) for v in row.tolist()]).tolist(), dtype=torch.float64)
        auto = torch.autograd.functional.hessian(lambda v: _cyclic(*v), row)
        assert torch.allclose(auto, exact, rtol=1e-7, atol=1e-9)

    assert result.ok, str(result)
    assert result.gradgradcheck.ok is True and result.gradgradcheck.fast_mode
    assert "projection" in result.gradgradcheck.message
    assert all(c.ok for c in result.second) and len(result.second) == N * (N + 1) // 2
