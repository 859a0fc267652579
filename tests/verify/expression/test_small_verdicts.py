"""The smaller cases of issue 24 (case 5), each with its truth from torch or mpmath here:
cancellation named for (exp(x)-1)/x, arange bounds that overflow, limits that follow this
machine's memory, grads --steps findings, and the rewrite guard "computes the same function"."""

from __future__ import annotations

import copy
import math
import os

import mpmath
import pytest
import torch
from torch import nn

import gradcli
from gradcli import limits


def test_exp_minus_one_over_x_names_the_cancellation():
    x = torch.tensor([1e-10, 1e-8, 0.5], dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(((torch.exp(x) - 1) / x).sum(), x)
    with mpmath.workdps(50):
        truth = [float(mpmath.diff(lambda t: mpmath.expm1(t) / t, mpmath.mpf(v))) for v in x.tolist()]
    assert abs(auto[0].item() - truth[0]) > 100  # torch's autograd loses every digit at 1e-10
    result = gradcli.check("(exp(x)-1)/x", {"x": "[1e-10, 1e-8, 0.5]"})
    assert not result.ok
    (cause,) = [c for c in result.causes if c.is_bug]
    assert cause.kind == "cancellation" and cause.points == 2
    assert cause.examples[0]["exact"] == pytest.approx(truth[0], rel=1e-12)
    assert result.fix == "expm1(x) / x"


@pytest.mark.parametrize("spec", ["arange(0, 1e308, 1e-300)", "arange(-1e300, 1e300, 1e-20)"])
def test_arange_bounds_that_overflow_exit_2_without_a_traceback(cli, spec):
    start, end, step = (float(v) for v in spec[len("arange("):-1].split(","))
    assert math.isinf((end - start) / step)  # Python's own float: the count is not a number
    for command in (["check", "sin(x)"], ["trace", "sin(x).sum()"]):
        result = cli(*command, "--var", f"x={spec}")
        assert result.exit_code == 2
        assert "Traceback" not in result.stderr and result.stderr.startswith("error: ")


def _machine_memory() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            return next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_size_limits_follow_this_machines_memory(cli, tmp_path, monkeypatch):
    # within a few percent of what the OS says right now (others allocate meanwhile)
    assert limits.available_memory() == pytest.approx(_machine_memory(), rel=0.2)
    small = tmp_path / "meminfo"
    small.write_text("MemTotal:  2097152 kB\nMemAvailable:  1048576 kB\n")  # a 1 GiB machine
    monkeypatch.setattr(limits, "MEMINFO", str(small))
    assert limits.available_memory() == 1024**3
    values = 10_000_000  # far within the constant limits, beyond 1 GiB through two nodes
    assert values <= limits.MAX_ELEMENTS and values * 2 <= limits.MAX_WORK
    result = cli("trace", "sin(x).sum()", "--var", f"x=randn({values})")
    assert result.exit_code == 2 and "GB available" in result.stderr and "Traceback" not in result.stderr
    large = tmp_path / "meminfo_large"
    large.write_text("MemAvailable:  1073741824 kB\n")  # 1 TiB
    monkeypatch.setattr(limits, "MEMINFO", str(large))
    limits.check_work(values, 2)  # the same work fits there


class _Quartic(nn.Module):
    """out = w*x; with the loss out**4 and a large step, SGD diverges: ‖grad‖/‖w‖ = 4 w**2."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([1.0]))

    def forward(self, x):
        return self.w * x


class _Dying(nn.Module):
    """relu(w*x + b): one large step pushes the unit below 0, and its gradient is exactly 0."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1, 1)
        with torch.no_grad():
            self.lin.weight.fill_(1.0)
            self.lin.bias.fill_(0.5)

    def forward(self, x):
        return torch.relu(self.lin(x))


def _sgd(model, x, loss_fn, steps, lr):
    """Plain SGD by hand: each step's gradient norms per parameter."""
    twin = copy.deepcopy(model)
    norms = []
    for _ in range(steps):
        params = list(twin.parameters())
        grads = torch.autograd.grad(loss_fn(twin(x)), params)
        norms.append([(g.norm().item(), p.detach().norm().item()) for g, p in zip(grads, params)])
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= lr * g
    return norms


def test_grads_steps_find_exploding_after_k_steps():
    model, x = _Quartic(), torch.tensor([1.0])
    norms = _sgd(model, x, lambda out: out.pow(4).sum(), 3, 1.0)
    ratios = [g / p for ((g, p),) in norms]
    first = next(k for k, r in enumerate(ratios) if r > 1e4)
    assert ratios[0] < 1e4 and first == 2
    result = gradcli.grads(model, x, loss="out.pow(4).sum()", steps=3, lr=1.0)
    (param,) = result.params
    (finding,) = [f for f in param.findings if f.flag == "EXPLODING"]
    assert f"after {first} SGD steps (lr 1)" in finding.reason
    assert result.ok and any("EXPLODING" in w for w in result.warnings)  # a warning, unless --strict
    assert not gradcli.grads(model, x, loss="out.pow(4).sum()", steps=3, lr=1.0, strict=True).ok


def test_grads_steps_find_a_unit_that_dies_after_k_steps():
    model, x = _Dying(), torch.tensor([[1.0]])
    norms = _sgd(model, x, lambda out: out.sum(), 3, 1.0)
    first = next(k for k, row in enumerate(norms) if all(g == 0 for g, _ in row))
    assert all(g > 0 for g, _ in norms[0]) and first == 1
    result = gradcli.grads(model, x, loss="out.sum()", steps=3, lr=1.0)
    for param in result.params:
        (finding,) = [f for f in param.findings if f.flag == "ZERO"]
        assert finding.reason == f"its gradient became exactly 0 after {first} SGD step (lr 1) (a unit died)"
    assert result.ok and sum("ZERO" in w for w in result.warnings) == 2  # a warning, unless --strict
    assert not gradcli.grads(model, x, loss="out.sum()", steps=3, lr=1.0, strict=True).ok


def test_a_rewrite_that_computes_another_function_is_never_proposed():
    # logsumexp(x, dim=0) is the log-sum-exp of a vector only: for a matrix it sums one
    # dimension, another function (torch says so), though its own check passes.
    x = torch.tensor([[1000.0, 1.0], [2.0, 3.0]], dtype=torch.float64)
    whole = torch.log(torch.exp(x).sum())
    rewritten = torch.logsumexp(x, dim=0)
    assert whole.shape != rewritten.shape and not torch.isfinite(whole)
    assert gradcli.check("logsumexp(x, dim=0)", {"x": "[[1000.0, 1.0], [2.0, 3.0]]"}).ok
    result = gradcli.check("log(sum(exp(x)))", {"x": "[[1000.0, 1.0], [2.0, 3.0]]"})
    (rewrite,) = [r for r in result.rewrites if r.rule == "logsumexp"]
    assert rewrite.wrong_after == 0 and rewrite.same_function is False and rewrite.proven is False
    assert result.fix is None
    # the same rule on a vector is the same function, and is proposed
    vector = gradcli.check("log(sum(exp(x)))", {"x": "[1000.0, 1.0]"})
    assert torch.logsumexp(torch.tensor([1000.0, 1.0]), 0).shape == torch.log(torch.tensor(1.0)).shape
    assert vector.fix == "logsumexp(x, dim=0)"
