"""`gradcli diverge --b ranks:2`: one process against torchrun's two (gloo), on
examples/diverge/ddp.py. The truth is the script's step computed here by hand, as DDP computes
it: each rank's forward and backward on its share of the batch, the gradients averaged."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from gradcli.divergence.band import FACTOR, UNIT
from gradcli.divergence.run import diverge
from gradcli.divergence.setups import RunSetup, parse_setup
from gradcli.watcher.script import Script
from paths import ROOT

EXAMPLE = ROOT / "examples" / "diverge" / "ddp.py"


def first_step_grads(batchnorm: bool, world: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """The script's first step on `world` ranks by hand: each rank's share, DDP's average."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16) if batchnorm else nn.Identity(), nn.Tanh(), nn.Linear(16, 1))
    net.to(dtype)
    data = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=data)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    x, y = x.to(dtype), y.to(dtype)
    total = [torch.zeros_like(p) for p in net.parameters()]
    for rank in range(world):
        net.zero_grad()
        nn.functional.mse_loss(net(x[rank::world]), y[rank::world]).backward()
        total = [t + p.grad / world for t, p in zip(total, net.parameters())]
    return [t.double() for t in total]


@pytest.fixture(scope="module")
def batchnorm():
    return diverge(Script(str(EXAMPLE), None, ("--batchnorm",)), RunSetup("same"), parse_setup("ranks:2"), steps=1)


def test_batchnorm_on_two_ranks_without_syncbatchnorm_parts_at_step_1(batchnorm):
    one, two = first_step_grads(True, 1), first_step_grads(True, 2)
    one64 = first_step_grads(True, 1, torch.float64)
    band = [FACTOR * (float((a - b).abs().max()) + UNIT["float32"] * float(b.abs().max())) for a, b in zip(one, one64)]
    assert any(float((a - b).abs().max()) > limit for a, b, limit in zip(one, two, band))  # by hand: past the band
    assert not batchnorm.ok
    assert batchnorm.first_step == 1 and batchnorm.parted in ("forward", "backward")
    assert batchnorm.cause is not None and batchnorm.cause.kind == "batchnorm-per-rank"
    assert batchnorm.cause.detail["modules"] == ["1"] and batchnorm.cause.detail["ranks"] == 2
    assert batchnorm.where is not None and (batchnorm.where.module, batchnorm.where.module_class) == ("1", "BatchNorm1d")
    assert batchnorm.steps[0].batch_same is None  # a rank's batch is its share: not compared by bytes


@pytest.mark.slow
def test_ddp_without_batchnorm_stays_within_the_band():
    one, two = first_step_grads(False, 1), first_step_grads(False, 2)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(one, two))
    result = diverge(Script(str(EXAMPLE), None, ()), RunSetup("same"), parse_setup("ranks:2"), steps=10)
    assert result.ok, [s.as_dict() for s in result.steps if s.phase][:1]


@pytest.mark.slow
def test_a_loss_scaled_by_the_world_size_doubles_every_gradient():
    result = diverge(Script(str(EXAMPLE), None, ("--scale-loss",)), RunSetup("same"), parse_setup("ranks:2"), steps=2)
    assert (result.first_step, result.cause.kind if result.cause else None) == (1, "gradients-scaled")
    assert result.cause.detail["ratio"] == pytest.approx(2.0, rel=1e-4)


@pytest.mark.slow
def test_another_interpreter_running_the_same_script_stays_within_the_band():
    # the same interpreter reached as python:PATH; another torch version: tests/divergence/test_diverge_torch_versions.py
    result = diverge(Script(str(ROOT / "examples" / "diverge" / "train.py"), None, ()), RunSetup("same"),
                     parse_setup(f"python:{sys.executable}"), steps=5)
    assert result.ok and len(result.steps) == 5
