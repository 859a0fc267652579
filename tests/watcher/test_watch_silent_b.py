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
    found = [i + 1 for i, line in enumerate(HERE.read_text().splitlines()) if text in line and "line_of" not in line and '"#' not in line]
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
def amp_loop(fixed: bool, steps: int = 4, before_clip=None, after_clip=None, value: bool = False) -> nn.Module:
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
        if value:
            norm = torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=0.5)  # the value clip
        else:
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


def test_clipping_values_of_scaled_gradients_is_found_with_its_line():
    scales: dict = {}
    amp_loop(False, value=True, before_clip=lambda step, model, scaler: scales.setdefault(step, scaler.get_scale()))
    result, _ = run(amp_loop, fixed=False, value=True)
    (f,) = found(result, "clip_before_unscale")
    assert f.line == line_of("clip_value=0.5)  # the value clip")
    assert f.detail["clip_value"] == 0.5 and f.detail["scale"] == scales[f.step]
    assert f.detail["unscaled_clip_value"] == 0.5 / scales[f.step]


@pytest.mark.parametrize("value", [False, True])
def test_clipping_after_unscale_is_clean(value):
    result, _ = run(amp_loop, fixed=True, value=value)
    assert not found(result, "clip_before_unscale")


# -- parameters changed outside the optimizer ------------------------------------------------------
def reinit(step, model, initial):
    nn.init.xavier_uniform_(model[2].weight)  # re-initialised every step


def restore(step, model, initial):
    model.load_state_dict(initial)  # put back every step


def resume(step, model, initial):
    if step == 4:
        model.load_state_dict(initial)  # loaded once, as a resume or a rollback does


def clamp(step, model, initial):
    with torch.no_grad():
        for p in model.parameters():
            p.clamp_(-0.05, 0.05)  # WGAN's critic


def data_clamp(step, model, initial):
    for p in model.parameters():
        p.data.clamp_(-0.05, 0.05)


def ema(step, model, initial):
    initial["teacher"].update_parameters(model)  # an EMA teacher (its parameters are in no optimizer)


def outside_loop(change, steps: int = 7, seen=None) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    wgan = change in (clamp, data_clamp)
    optimizer = (torch.optim.RMSprop if wgan else torch.optim.SGD)(model.parameters(), lr=5e-3 if wgan else 0.1)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    if change is ema:
        initial = {"teacher": torch.optim.swa_utils.AveragedModel(
            model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.99))}
    for step in range(1, steps + 1):
        change(step, model, initial)
        if seen is not None:
            seen.append({k: v.clone() for k, v in model.named_parameters()})
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16, 8, generator=g)
        optimizer.zero_grad()
        F.mse_loss(model(x), x[:, :2]).backward()
        optimizer.step()
        if seen is not None:
            seen.append({k: v.detach().clone() for k, v in model.named_parameters()})
    return model


def changed_between_steps(change) -> set[str]:
    """torch's truth: the parameters whose value at a step's start differs from the one the
    previous step left, at two steps in a row."""
    seen: list = []
    outside_loop(change, seen=seen)
    after, start = seen[1::2], seen[2::2]
    changed = [{k for k in s if not torch.equal(s[k], a[k])} for a, s in zip(after, start)]
    return {k for a, b in zip(changed, changed[1:]) for k in a & b}


@pytest.mark.parametrize("change, line", [(reinit, "# re-initialised every step"), (restore, "# put back every step")])
def test_parameters_changed_outside_the_optimizer_are_found_with_the_line(change, line):
    truth = changed_between_steps(change)
    result, _ = run(outside_loop, change=change)
    (f,) = found(result, "changed_outside")
    assert set(f.parameters) == truth and truth
    assert f.line == line_of(line)
    assert f.detail["reinitialised" if change is reinit else "restored"] == len(truth)


@pytest.mark.parametrize("change", [resume, clamp, data_clamp, ema])
def test_changes_made_on_purpose_are_not_found(change):
    truth = changed_between_steps(change)
    if change is clamp:
        assert truth  # the clamp does change the critic's weights between steps
    result, weights = run(outside_loop, change=change)
    assert not found(result, "changed_outside")
    final = outside_loop(change).state_dict()
    assert all(torch.equal(weights[k], v) for k, v in final.items())


# -- units that stay identical --------------------------------------------------------------------
def units_loop(init: str, steps: int = 12, seen=None) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    if init == "constant":
        for p in model.parameters():
            nn.init.constant_(p, 0.1)  # every hidden unit the same
    elif init == "zero_last":
        nn.init.zeros_(model[2].weight)  # starts equal, parts at the first step
    elif init == "lora":
        model[2] = LoRA(model[2])
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for step in range(1, steps + 1):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(32, 8, generator=g)
        optimizer.zero_grad()
        F.cross_entropy(model(x), (x[:, 0] > 0).long() + (x[:, 1] > 0).long()).backward()
        optimizer.step()
        if seen is not None:
            seen.append({k: v.detach().clone() for k, v in model.named_parameters()})
    return model


class LoRA(nn.Module):
    """A frozen layer plus B·A, with B = 0 at the start."""

    def __init__(self, base: nn.Linear, rank: int = 2) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(rank, base.in_features) * 0.1)
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + x @ self.A.t() @ self.B.t()


def identical_at_end(init: str) -> dict[str, int]:
    """torch's truth: per weight of 2+ dimensions, the rows still equal to its first row after
    the run, counted when they were equal at the start too."""
    seen: list = []
    units_loop(init, seen=seen)
    last = seen[-1]
    counts = {}
    for name, w in last.items():
        if w.dim() >= 2:
            same = int((w.flatten(1) == w.flatten(1)[0]).all(1).sum())
            if same >= 2:
                counts[name] = same
    return counts


def test_a_constant_initialisation_keeps_units_identical():
    truth = identical_at_end("constant")
    assert truth == {"0.weight": 16}
    result, _ = run(units_loop, init="constant")
    (f,) = found(result, "identical_units")
    assert f.parameters == list(truth) and f.detail["units"] == 16 and f.detail["since_step"] == 1


@pytest.mark.parametrize("init", ["random", "zero_last", "lora"])
def test_units_that_start_equal_and_part_are_not_found(init):
    assert identical_at_end(init) == {}
    result, _ = run(units_loop, init=init)
    assert not found(result, "identical_units")
