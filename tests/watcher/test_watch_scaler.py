"""gradcli.watch around a float16 autocast + GradScaler loop (CPU).

GradScaler skips `optimizer.step()` when a scaled gradient overflows and halves its scale: the
first skips while the scale settles are normal, a run of skips that does not end is a fault.
The truth is the same loop without gradcli: which iterations torch applied (an optimizer step
post-hook), the scale at each, which backward node first sent on a non-finite gradient and in
which module (torch's node and forward hooks), and whether a GradScaler started at the scale
gradcli says would fit really applies the stopped step.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

import gradcli
from gradcli.render.training.watch import watch_lines
from gradcli.watcher.options import WatchOptions
from paths import TESTS
from watch_truths import first_nonfinite_backward

SKIPS = WatchOptions().skips


class Net(torch.nn.Module):
    def __init__(self, big: bool):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU())
        self.head = torch.nn.Linear(64, 1)
        if big:  # a finite forward whose float16 backward through head overflows until the scale is small
            with torch.no_grad():
                self.head.weight.mul_(1000)

    def forward(self, x):
        return self.head(self.body(x))


def batches(steps):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)) for _ in range(steps)]


def loss_of(model, x, y):
    with torch.autocast("cpu", dtype=torch.float16):
        return torch.nn.functional.mse_loss(model(x).float(), y)


def loop(steps, big, init_scale=65536.0):
    """The user's loop; returns the model, which iterations were applied, and the scale at each."""
    torch.manual_seed(0)
    model = Net(big)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    applied, scales = [], []
    optimizer.register_step_post_hook(lambda *_: applied.append(len(scales)))
    try:
        for x, y in batches(steps):
            optimizer.zero_grad()
            scaler.scale(loss_of(model, x, y)).backward()
            scales.append(scaler.get_scale())
            scaler.step(optimizer)
            scaler.update()
    except gradcli.WatchStop:
        pass
    return model, [i in applied for i in range(1, len(scales) + 1)], scales


def first_overflow(step, scale):
    """torch's node hooks on the stopped step: the first node sending on inf, and its module."""
    torch.manual_seed(0)
    model = Net(True)
    x, y = batches(step)[step - 1]
    return first_nonfinite_backward([(name, m) for name, m in model.named_modules() if name],
                                    lambda: loss_of(model, x, y) * scale)


def test_skips_that_do_not_end_stop_with_the_overflowing_module_and_a_scale_that_fits():
    _, applied, scales = loop(SKIPS + 2, True)
    assert not any(applied[:SKIPS])  # torch: every step skipped, the scale halving each time
    with gradcli.watch() as w:
        model, _, _ = loop(SKIPS + 2, True)
    stop = w.result.stop
    assert stop.kind == "scaler_skips" and stop.step == SKIPS and w.result.skipped == SKIPS
    assert stop.scale == scales[SKIPS - 1]
    torch.manual_seed(0)
    fresh = Net(True)
    assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in model.state_dict().items())
    assert (stop.origin.node, stop.origin.module) == first_overflow(SKIPS, stop.scale) == ("AddmmBackward0", "head")
    assert stop.cause.kind == "float16_overflow"
    # torch: a GradScaler started at the scale said to fit applies the stopped step's batch; far above, it skips
    fits = stop.fits
    assert fits is not None

    def applies(scale):
        torch.manual_seed(0)
        m = Net(True)
        opt = torch.optim.SGD(m.parameters(), lr=1e-6)
        scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        x, y = batches(SKIPS)[SKIPS - 1]
        scaler.scale(loss_of(m, x, y)).backward()
        before = m.head.weight.detach().clone()
        scaler.step(opt)
        return not torch.equal(before, m.head.weight)

    assert applies(fits) and not applies(fits * 16)
    shown = "\n".join(watch_lines(w.result))
    assert f"0 step(s) of it applied, {SKIPS} skipped by GradScaler" in shown
    assert f"GradScaler's scale: {stop.scale:g}; a scale of {fits:g} would fit" in shown


def test_a_healthy_scaled_loop_is_not_stopped_and_its_skips_are_counted():
    plain, applied, _ = loop(40, False, init_scale=2.0 ** 20)  # a start too high: the scale settles first
    skipped = applied.count(False)
    assert 1 <= skipped < SKIPS  # torch: a few skips, then steps applied
    with gradcli.watch() as w:
        watched, _, _ = loop(40, False, init_scale=2.0 ** 20)
    # The loop's SGD at lr=1e-6 keeps the weights where the scaler tests want them: nothing learns,
    # and watch rightly says so (update_ratio); no other finding, no stop.
    assert w.result.stop is None and [f.kind for f in w.result.findings] == ["update_ratio"]
    assert w.result.skipped == skipped and w.result.steps == applied.count(True)
    assert f"{applied.count(True)} optimizer step(s) applied, {skipped} skipped by GradScaler" in watch_lines(w.result)[0]
    for (name, a), (_, b) in zip(plain.state_dict().items(), watched.state_dict().items()):
        assert torch.equal(a, b), name


def test_the_command_lines_skips_option_sets_how_many_skips_make_a_stop(tmp_path):
    from typer.testing import CliRunner

    from gradcli.cli import app

    _, applied, _ = loop(6, True)
    assert not any(applied[:3])  # torch: the first three steps are skipped
    script = tmp_path / "train.py"
    script.write_text(f"import sys\nsys.path[:0] = [{str(Path(__file__).parent)!r}, {str(TESTS)!r}]\n"
                      "import test_watch_scaler\ntest_watch_scaler.loop(6, True)\n")
    out = tmp_path / "watch.json"
    result = CliRunner().invoke(app, ["watch", "-q", "--skips", "3", "--no-replay", "--json", str(out), str(script)])
    assert result.exit_code == 1, result.output
    stop = json.loads(out.read_text())["stop"]
    assert stop["kind"] == "scaler_skips" and stop["step"] == 3
