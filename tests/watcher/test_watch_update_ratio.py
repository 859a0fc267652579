"""Nothing learns / updates far too large (detectors/update_ratio.py): each bug and its fixed
twin, the truth from torch on the same loop (each layer's ‖Δw‖/‖w‖ computed here by hand, and
the losses).

The bugs: Adam (and SGD with momentum) at a learning rate 1e-4 times the twin's, so that
nothing learns, and Adam at 1.0, which makes the loss oscillate without a nan.
"""

from __future__ import annotations

import math
import statistics
import textwrap

import pytest
import torch
from torch.nn import functional as F

import gradcli
from gradcli.watcher.detectors.update_ratio import HIGH, LOW, measured
from watch_healthy import MLP, _classes, _data

STEPS = 40
LAYERS = ("body.0", "body.2", "head")


def train(optimizer: str, lr: float, truth: dict | None = None) -> list[float]:
    """The loop; `truth`, when given, gets each step's layer ratios ‖Δw‖/‖w‖ (torch, by hand)."""
    torch.manual_seed(0)
    model = MLP()
    opt = (torch.optim.Adam(model.parameters(), lr=lr) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9))
    losses = []
    for step in range(1, STEPS + 1):
        x, y = _classes(_data(0, step))
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt.step()
        losses.append(float(loss.detach()))
        if truth is not None:
            with torch.no_grad():
                truth[step] = _ratios(model, before)
    return losses


def _ratios(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> dict[str, float]:
    return {layer: math.sqrt(
        sum(float((p - before[n]).norm()) ** 2 for n, p in model.named_parameters() if n.startswith(layer + "."))
        / sum(float(p.norm()) ** 2 for n, p in model.named_parameters() if n.startswith(layer + ".")))
        for layer in LAYERS}


def watched(optimizer: str, lr: float):
    with gradcli.watch() as w:
        losses = train(optimizer, lr)
    return w.result, losses


@pytest.mark.parametrize("optimizer, lr", [("adam", 1e-7), ("sgd", 5e-6)])
def test_a_learning_rate_1e4_times_too_small_is_found_with_torchs_ratios(optimizer, lr):
    truth: dict = {}
    losses = train(optimizer, lr, truth)
    twin = train(optimizer, lr * 1e4)
    # torch: the loss does not move, while the twin's falls
    assert abs(statistics.mean(losses[-10:]) - statistics.mean(losses[:10])) < 0.02 * losses[0]
    assert statistics.mean(twin[-10:]) < 0.95 * statistics.mean(twin[:10])
    result, seen = watched(optimizer, lr)
    assert seen == losses
    found = [f for f in result.findings if f.kind == "update_ratio"]
    assert len(found) == 1 and not result.ok
    d = found[0].detail
    assert d["how"] == "small" and d["measured_steps"] == [1, 2, 4] and found[0].step == 1
    for at in d["measured_steps"]:  # torch's fastest layer, below the bound at each measured step
        assert max(truth[at].values()) < LOW
    assert set(found[0].modules) == set(LAYERS)
    for layer, ratio in zip(found[0].modules, d["ratios"]):
        assert ratio == pytest.approx(truth[4][layer], rel=1e-4)
    assert d["value"] == pytest.approx(max(truth[4].values()), rel=1e-4)
    assert found[0].modules == sorted(LAYERS, key=truth[4].get)


def test_a_learning_rate_that_makes_the_loss_oscillate_is_found_with_torchs_ratios():
    truth: dict = {}
    losses = train("adam", 1.0, truth)
    twin = train("adam", 1e-3)
    assert all(math.isfinite(v) for v in losses)  # no nan to stop on
    assert max(losses) > 100 * losses[0] and max(twin) < 1.2 * twin[0]  # it jumps, the twin's does not ...
    assert sum(1 for a, b in zip(losses, losses[1:]) if b > a) >= len(losses) // 4  # ... and goes up and down
    result, _ = watched("adam", 1.0)
    found = [f for f in result.findings if f.kind == "update_ratio"]
    assert len(found) == 1
    d = found[0].detail
    assert d["how"] == "large" and d["measured_steps"] == [1, 2]
    for at in d["measured_steps"]:
        assert statistics.median(truth[at].values()) > HIGH
    assert d["value"] == pytest.approx(statistics.median(truth[2].values()), rel=1e-4)
    assert set(found[0].modules) == {layer for layer in LAYERS if truth[2][layer] > HIGH}
    for layer, ratio in zip(found[0].modules, d["ratios"]):
        assert ratio == pytest.approx(truth[2][layer], rel=1e-4)


@pytest.mark.parametrize("optimizer, lr", [("adam", 1e-3), ("sgd", 0.05)])
def test_the_fixed_twin_is_clean_and_its_ratios_are_within_the_band(optimizer, lr):
    truth: dict = {}
    train(optimizer, lr, truth)
    for at, ratios in truth.items():
        if measured(at, 100):
            assert max(ratios.values()) > LOW and statistics.median(ratios.values()) < HIGH
    result, _ = watched(optimizer, lr)
    assert result.findings == [] and result.ok


def test_the_cadence_is_sparse():
    assert [c for c in range(1, 400) if measured(c, 100)] == [1, 2, 4, 8, 16, 32, 64, 100, 128, 200, 256, 300]
    assert [c for c in range(1, 40) if measured(c, 0)] == [1, 2, 4, 8, 16, 32]


def test_the_cli_reports_it_with_its_fix(cli, tmp_path):
    script = tmp_path / "tiny_lr.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-7)
        for step in range(12):
            g = torch.Generator().manual_seed(step)
            x = torch.randn(32, 8, generator=g)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long()).backward()
            optimizer.step()
    """))
    result = cli("watch", str(script))
    assert result.exit_code == 1, result.output
    assert "updates far off the weights' size (Adam): 0.weight, 0.bias, 2.weight, 2.bias" in result.output
    assert "the largest layer's ‖Δw‖/‖w‖ per step was" in result.output
    assert "below 1e-05 at steps 1, 2, 4" in result.output
    assert "tiny_lr.py:6  optimizer = torch.optim.Adam(model.parameters(), lr=1e-7)" in result.output
    assert "fix: a learning rate nearer the usual" in result.output
