"""`gradcli diverge` on a run that `gradcli watch` would stop: examples/diverge/train.py's corrupt
batch (--bad-batch K, inputs x 1e5) is taken by float32 and overflows float16 (65504) under
autocast, so run b's loss is nan at step K. The truth is the same loop run here in plain torch:
the step whose loss is not finite, the parameters whose gradients are not, and the first module
whose output is not."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch
from paths import ROOT
from shared_runs import RUNS, shared_json_run

EXAMPLE = ROOT / "examples" / "diverge" / "train.py"
BAD_AT, STEPS = 2, 3


def _example():
    spec = importlib.util.spec_from_file_location("diverge_train_example_stops", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_nonfinite(half: torch.dtype | None, steps: int) -> tuple[int, list[str], str] | None:
    """By hand: the script's loop (under CPU autocast with GradScaler's loop for float16), and the
    first step whose loss is not finite, with the parameters whose gradients are not and the first
    module whose output is not."""
    from gradcli.divergence.recorder import INIT_SCALE

    example = _example()
    torch.manual_seed(0)
    model = example.MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, enabled=half is not None)
    bad_outputs: list[str] = []
    for name, module in model.named_children():
        module.register_forward_hook(lambda m, args, out, name=name: bad_outputs.append(name)
                                     if not torch.isfinite(out).all() else None)
    data = torch.Generator().manual_seed(1)
    for step in range(1, steps + 1):
        x = torch.randn(32, 8, generator=data)
        y = torch.sin(x.sum(dim=1, keepdim=True))
        if step == BAD_AT:
            x = x * example.BAD
        bad_outputs.clear()
        with torch.autocast("cpu", dtype=half or torch.float16, enabled=half is not None):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        if not torch.isfinite(loss):
            bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
            return step, bad, bad_outputs[0]
        scaler.step(optimizer)
        scaler.update()
    return None


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """`gradcli diverge --b autocast:float16 --json PATH examples/diverge/train.py --steps 3
    --bad-batch 2`, run once for this file and test_json_docs.py (tests/shared_runs.py)."""
    run = shared_json_run("diverge-float16-stop", tmp_path_factory)
    assert RUNS["diverge-float16-stop"][-4:] == ["--steps", str(STEPS), "--bad-batch", str(BAD_AT)]
    return SimpleNamespace(exit_code=run["exit_code"], stdout=run["stdout"]), run["document"]


def test_a_float16_run_whose_loss_goes_nan_is_stopped_as_watch_stops_it(stopped):
    assert first_nonfinite(None, STEPS) is None  # float32 takes the corrupt batch
    step, parameters, module = first_nonfinite(torch.float16, STEPS)
    assert step == BAD_AT
    done, document = stopped
    assert done.exit_code == 1, done.stdout
    assert document["ok"] is False
    [stop] = document["stops"]
    assert (stop["run"], stop["setup"], stop["step"]) == ("b", "autocast:float16", step)
    watch = stop["stop"]
    assert (watch["step"], watch["kind"], watch["optimizer"]) == (step, "nonfinite_loss", "SGD")
    assert watch["loss"] == "nan"
    assert watch["parameters"] == parameters and watch["module"] == parameters[0].rpartition(".")[0]
    assert watch["origin"]["phase"] == "forward" and watch["origin"]["module"] == module
    # the steps before it were judged, within float16's band
    assert [s["step"] for s in document["series"]] == list(range(1, step))
    assert all(s["phase"] is None for s in document["series"])


def test_the_stop_is_worded_by_watchs_own_renderer(stopped):
    from gradcli.render.training.watch import stop_lines
    from gradcli.watcher.result import Replay, Stop, WatchCause, WatchOrigin, WatchResult

    done, document = stopped
    d = document["stops"][0]["stop"]
    assert f"STOPPED: run b (autocast:float16) at step {BAD_AT}, as gradcli watch stops it:" in done.stdout
    # watch's words for the same record (the origin's line, which the document leaves out, is None here)
    origin = WatchOrigin(**{**d["origin"], "module_class": "Linear", "code": None})
    stop = Stop(d["step"], d["kind"], d["optimizer"], d["parameters"], d["module"], float("nan"), origin=origin,
                cause=WatchCause(**d["cause"]), replay=Replay(**d["replay"]))
    words = stop_lines("run b", WatchResult(checks=BAD_AT, stop=stop))
    assert words[0] in done.stdout and words[1] in done.stdout  # the stop and "the loss is not finite (loss nan)"
    assert "  origin: forward, linear, in Linear (fc1)" in done.stdout
    assert f"stopped at step {BAD_AT} of SGD in run b (autocast:float16), before it was applied" in document["problems"][0]
