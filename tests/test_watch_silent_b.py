"""Silent training bugs, second set (gradcli/watcher/detectors/: clip_scaled, outside_optimizer,
identical_units): each bug's loop and its fixed twin, the truth from torch on the same loop run
without gradcli (the norm clip_grad_norm_ returned and the scaler's scale, the parameters' values
between two steps, the rows of a weight)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import gradcli

HERE = Path(__file__)


def line_of(text: str) -> int:
    found = [i + 1 for i, line in enumerate(HERE.read_text().splitlines()) if text in line and "line_of" not in line]
    assert len(found) == 1, (text, found)
    return found[0]


def run(loop, **kwargs) -> tuple[gradcli.WatchResult, dict]:
    """The loop under gradcli.watch(), and the weights it ends with."""
    with gradcli.watch() as w:
        model = loop(**kwargs)
    return w.result, {k: v.clone() for k, v in model.state_dict().items()}


def found(result, kind: str) -> list:
    return [f for f in result.findings if f.kind == kind]


# -- clipping before scaler.unscale_() ---------------------------------------------------------
def amp_loop(fixed: bool, steps: int = 4, before_clip=None, after_clip=None) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    for step in range(1, steps + 1):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if fixed:
            scaler.unscale_(optimizer)
        if before_clip is not None:
            before_clip(step, model, scaler)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # the clip
        if after_clip is not None:
            after_clip(step, norm)
        scaler.step(optimizer)
        scaler.update()
    return model


def test_clipping_scaled_gradients_is_found_with_its_line():
    truth: dict = {}

    def before(step, model, scaler):
        grads = [p.grad.double() for p in model.parameters()]
        truth[step] = {"scale": float(scaler.get_scale()), "norm": math.sqrt(sum(float(g.pow(2).sum()) for g in grads))}

    def after(step, norm):
        truth[step]["returned"] = float(norm)

    final = amp_loop(False, before_clip=before, after_clip=after).state_dict()
    result, weights = run(amp_loop, fixed=False)
    assert all(torch.equal(weights[k], v) for k, v in final.items())  # watching changed nothing
    (f,) = found(result, "clip_before_unscale")
    first = min(s for s, t in truth.items() if math.isfinite(t["returned"]))  # (a step GradScaler skips: inf)
    assert f.step == first
    assert f.line == line_of("max_norm=1.0)  # the clip")
    t = truth[first]
    assert f.detail["clipped_norm"] == pytest.approx(t["returned"], rel=1e-6) == pytest.approx(t["norm"], rel=1e-4)
    assert f.detail["scale"] == t["scale"] > 1000
    assert f.detail["unscaled_norm"] == pytest.approx(t["norm"] / t["scale"], rel=1e-4)
    assert not f.warning and result.ok is False


def test_clipping_after_unscale_is_clean():
    result, _ = run(amp_loop, fixed=True)
    assert not found(result, "clip_before_unscale")
