"""watch's per-layer warnings (gradcli/watcher/precursors.py): each layer's g² against Adam's
second moment, and each layer's gradient norm against its own window.

The truths come from the same loop run without gradcli: each layer's Σg² / Σv̂ computed with
torch from the optimizer's own state just before each step, the per-layer and global norms
of the step a fault hits, and the weights after s-1 steps.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import gradcli
from gradcli.errors import UsageError
from gradcli.watcher.options import WatchOptions

RAMP_FROM = 30


def classifier() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed random teacher's labels: a task the model learns, so that a loss can rise."""
    g, teacher = torch.Generator().manual_seed(step), torch.Generator().manual_seed(99)
    x = torch.randn(64, 32, generator=g)
    w1, w2 = torch.randn(32, 64, generator=teacher), torch.randn(64, 10, generator=teacher)
    return x, (torch.tanh(x @ w1) @ w2).argmax(1)


def train(make_optimizer, steps: int, ramp: float = 1.0, before_step=None) -> nn.Module:
    """The user's loop: the learning rate multiplied by `ramp` every step from RAMP_FROM (a
    warmup that overshoots). `before_step(step, model, optimizer)` reads torch's truth."""
    torch.manual_seed(0)
    model = classifier()
    optimizer = make_optimizer(model.parameters())
    for step in range(1, steps + 1):
        if step >= RAMP_FROM:
            for group in optimizer.param_groups:
                group["lr"] *= ramp
        x, y = batch(step)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        if before_step is not None:
            before_step(step, model, optimizer)
        optimizer.step()
    return model


def torch_ratios(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """Each layer's Σg² / Σv̂ from the optimizer's state before the step (parameters Adam has
    updated at least 10 times), in float64."""
    beta2 = optimizer.param_groups[0]["betas"][1]
    ratios = {}
    for name, module in model.named_modules():
        squares = expected = 0.0
        for p in module.parameters(recurse=False):
            state = optimizer.state.get(p, {})
            if "exp_avg_sq" not in state or int(state["step"]) < 10:
                continue
            squares += float(p.grad.double().pow(2).sum())
            expected += float(state["exp_avg_sq"].double().sum()) / (1 - beta2 ** int(state["step"]))
        if expected > 0:
            ratios[name] = squares / expected
    return ratios


def ramp_truth(make_optimizer, steps: int, ramp: float) -> tuple[dict[int, dict[str, float]], dict[int, dict]]:
    ratios, weights = {}, {}

    def read(step, model, optimizer):
        ratios[step] = torch_ratios(model, optimizer)
        weights[step] = {k: v.clone() for k, v in model.state_dict().items()}  # as after step-1

    train(make_optimizer, steps, ramp, read)
    return ratios, weights


def logged(path) -> dict[int, dict[str, float]]:
    return {r["step"]: r["adam_ratios"] for r in map(json.loads, path.read_text().splitlines())}


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)


STEPS, RAMP = 110, 1.08
#: The limit the ramp's tests set: this short ramp passes 10 but not the default (30, which the
#: healthy runs of bench/watch_calibrate.py set); what is tested is the mechanism at a limit.
LIMIT = 10.0


@pytest.fixture(scope="module")
def ramped():
    """torch's truth for the ramped AdamW run: each step's ratios, the weights before each
    step, and the first step a layer's ratio passes the default limit."""
    truth, weights = ramp_truth(adamw, STEPS, RAMP)
    first = next(s for s in sorted(truth) if any(r > LIMIT for r in truth[s].values()))
    assert RAMP_FROM < first < STEPS
    return truth, weights, first


def test_adam_ratio_warns_at_the_step_torch_says_with_its_layers(tmp_path, ramped):
    truth, _, first = ramped
    limit = LIMIT
    with gradcli.watch(log=tmp_path / "steps.jsonl", adam_ratio=LIMIT) as w:
        train(adamw, STEPS, RAMP)
    warnings = [f for f in w.result.findings if f.kind == "adam_ratio"]
    assert warnings and warnings[0].step == first
    assert {f.detail["layer"] for f in warnings if f.step == first} == {
        layer for layer, r in truth[first].items() if r > limit}
    assert all(f.parameters == [f"{f.detail['layer']}.weight", f"{f.detail['layer']}.bias"] for f in warnings)
    assert not [f for f in w.result.findings if f.step < first]  # no warning while the run was steady
    # every step's ratios, kept by Adam's recursion between reads, are torch's
    seen = logged(tmp_path / "steps.jsonl")
    for step, ratios in truth.items():
        assert seen[step].keys() == ratios.keys(), step
        for layer, r in ratios.items():
            assert seen[step][layer] == pytest.approx(r, rel=1e-3), (step, layer)


def test_stop_on_spike_stops_before_the_step_adam_would_overshoot(ramped):
    truth, weights, first = ramped
    models = []
    with pytest.raises(gradcli.WatchStop) as stopped:
        with gradcli.watch(stop_on=("nonfinite", "spike"), adam_ratio=LIMIT):
            train(lambda params: adamw(params), STEPS, RAMP, lambda step, model, _: models.append(model))
    stop = stopped.value.result.stop
    assert stop.step == first and stop.kind == "spike" and stop.module in truth[first]
    assert stop.parameters == [f"{stop.module}.weight", f"{stop.module}.bias"]
    assert "Adam's second moment" in " ".join(stopped.value.result.notes)
    for name, value in models[0].state_dict().items():  # steps 1..first-1 applied, not step first
        assert torch.equal(value, weights[first][name]), name


@pytest.mark.parametrize("make_optimizer, every", [
    (lambda params: torch.optim.Adam(params, lr=1e-3, weight_decay=0.1), 1),  # L2: Adam squares g + wd·p
    (adamw, 3),  # steps the check does not see
    (lambda params: torch.optim.NAdam(params, lr=1e-3), 1),
])
def test_the_ratio_is_read_again_where_adams_recursion_cannot_be_followed(tmp_path, make_optimizer, every):
    truth, _ = ramp_truth(make_optimizer, 36, 1.0)
    with gradcli.watch(log=tmp_path / "steps.jsonl", every=every) as w:
        train(make_optimizer, 36, 1.0)
    seen = logged(tmp_path / "steps.jsonl")
    assert sorted(seen) == list(range(every, 37, every)) and w.result.findings == []
    for step in seen:
        assert seen[step].keys() == truth[step].keys(), step
        for layer, r in truth[step].items():
            assert seen[step][layer] == pytest.approx(r, rel=1e-3), (step, layer)


def test_sgd_has_no_ratio(tmp_path):
    with gradcli.watch(log=tmp_path / "steps.jsonl") as w:
        train(lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9), 20)
    assert all(r == {} for r in logged(tmp_path / "steps.jsonl").values()) and w.result.findings == []


class Gated(nn.Module):
    """A wide network plus a one-feature gate whose feature is almost always near 0 (a rare
    flag, plus noise): the gate's gradient is tiny beside the network's, until the flag is set."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
        self.gate = nn.Linear(1, 1, bias=False)

    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
        return self.net(x) + self.gate(flag)


FLAGGED = 40


def gated_run(steps: int = 50, before_step=None) -> None:
    torch.manual_seed(0)
    model = Gated()
    with torch.no_grad():
        model.gate.weight.zero_()  # the flag has never been seen: its weight is still 0
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(1, steps + 1):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(32, 16, generator=g)
        y = x[:, :4].sum(1, keepdim=True)
        flag = 1e-3 * torch.randn(32, 1, generator=g)
        if step == FLAGGED:
            flag[0] = 50.0
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x, flag), y).backward()
        if before_step is not None:
            before_step(step, model)
        optimizer.step()


def test_a_layer_spike_the_global_norm_hides_is_warned_with_its_layer():
    norms = {}

    def read(step, model):
        layer = float(torch.linalg.vector_norm(model.gate.weight.grad))
        total = float(torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()])))
        norms[step] = (layer, total)

    gated_run(before_step=read)
    before = [norms[s] for s in range(FLAGGED - 10, FLAGGED)]
    layer_median = sorted(n[0] for n in before)[5]
    total_median = sorted(n[1] for n in before)[5]
    # torch's truth: the gate's gradient norm jumps by orders of magnitude, the whole norm does not
    assert norms[FLAGGED][0] > 30 * layer_median and norms[FLAGGED][1] < 2 * total_median
    with gradcli.watch() as w:
        gated_run()
    found = [(f.step, f.kind, f.module) for f in w.result.findings]
    assert (FLAGGED, "layer_spike", "gate") in found
    assert not [f for f in w.result.findings if f.kind in ("grad_spike", "loss_spike")]
    assert all(step == FLAGGED for step, _, _ in found)


def test_adam_ratio_is_checked_as_an_option():
    with pytest.raises(UsageError, match="--adam-ratio must be above 1"):
        WatchOptions(adam_ratio=0.5)


def test_steps_a_gradscaler_skips_leave_the_ratio_true(tmp_path):
    """GradScaler skips steps (float16 gradients overflow at its first scales, and again each
    time it grows its scale back): Adam does not update then, and the ratio must follow what
    Adam did, not what the check saw."""

    def loop(before_step=None):
        torch.manual_seed(0)
        model = classifier()
        optimizer = adamw(model.parameters())
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24, growth_interval=3)
        skipped = []
        for step in range(1, 41):
            x, y = batch(step)
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(x).float(), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
            if not finite:
                skipped.append(step)
            elif before_step is not None:
                before_step(step, model, optimizer)
            scaler.step(optimizer)
            scaler.update()
        return skipped

    truth = {}
    skipped = loop(lambda step, model, optimizer: truth.setdefault(step, torch_ratios(model, optimizer)))
    assert [s for s in skipped if s > 12]  # torch: skips after Adam's state exists
    with gradcli.watch(log=tmp_path / "steps.jsonl") as w:
        assert loop() == skipped
    assert w.result.skipped == len(skipped)
    seen = logged(tmp_path / "steps.jsonl")
    ratios = [step for step in truth if truth[step]]
    assert ratios  # Adam's tenth update came before the end
    for step in ratios:
        assert seen[step].keys() == truth[step].keys(), step
        for layer, r in truth[step].items():
            assert seen[step][layer] == pytest.approx(r, rel=1e-3), (step, layer)
