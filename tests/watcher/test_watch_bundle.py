"""A replay bundle is data: `gradcli watch --save DIR` on a script whose training loop sits at
top level (no `if __name__ == "__main__":`), read back by `grads` and `trace` without the loop
running again, and by `torch.load(..., weights_only=True)`.

The truth: the same script run by python without gradcli, which at the bad step saves the
gradients torch's own backward gave (and every step it runs leaves a line in a log file, so
that a rerun of the loop would be seen).
"""

from __future__ import annotations

import json
import os
import runpy
import textwrap

import pytest
import torch
from typer.testing import CliRunner

from gradcli.cli import app
from gradcli.watcher.options import WatchOptions
from gradcli.watcher.run import watch_script
from gradcli.watcher.script import Script

BAD = 7  # 0-based loop index: the 8th optimizer step holds a zero row

SCRIPT = textwrap.dedent('''
    import os
    import torch
    from torch import nn

    SCALE = 0.5


    class Block(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.fc = nn.Linear(n, n)
            self.act = torch.tanh  # a function held as an attribute
            self.shared = None

        def forward(self, x):
            return self.act(self.fc(x)) * SCALE


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block(4)
            self.head = nn.Linear(4, 4, bias=False)
            self.head.weight = self.block.fc.weight  # tied weights: one parameter in two modules
            self.register_buffer("seen", torch.zeros(()))

        def forward(self, x):
            self.seen += 1
            return self.head(self.block(x) / x.norm(dim=1, keepdim=True)).sum(dim=1)


    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range({steps}):
        x = torch.randn(8, 4)
        if step == {bad}:
            x[2] = 0
        loss = model(x).pow(2).mean()
        print(f"step {{step}} loss {{loss.item():.3f}}")
        with open(os.environ["STEPS_LOG"], "a") as log:
            log.write(f"{{step}}\\n")
        opt.zero_grad()
        loss.backward()
        if step == {bad} and os.environ.get("TRUTH"):
            torch.save({{n: p.grad.clone() for n, p in model.named_parameters()}}, os.environ["TRUTH"])
            break
        opt.step()
''')


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundle")
    script = folder / "toplevel.py"
    script.write_text(SCRIPT.format(steps=12, bad=BAD))
    log, truth = folder / "steps.log", folder / "truth.pt"
    os.environ["STEPS_LOG"] = str(log)
    try:
        os.environ["TRUTH"] = str(truth)
        runpy.run_path(str(script), run_name="__main__")  # python toplevel.py, unwatched
        del os.environ["TRUTH"]
        result = watch_script(Script(str(script), None), WatchOptions(save=folder / "bundle"))
    finally:
        os.environ.pop("TRUTH", None)
        os.environ.pop("STEPS_LOG", None)
    assert result.stop is not None and result.stop.step == BAD + 1
    return folder, torch.load(truth), log.read_text().count("\n")


def test_the_bundle_is_read_by_torch_load_weights_only(saved):
    folder, _, _ = saved
    payload = torch.load(folder / "bundle" / "step.pt", weights_only=True)
    assert payload["format"] == 2 and all(isinstance(t, torch.Tensor) for t in payload["tensors"])


def test_reading_the_bundle_rebuilds_the_model_without_running_the_loop(saved, capfd, monkeypatch):
    folder, truth, steps = saved
    from gradcli.watcher.bundle import ReplayedStep

    monkeypatch.setenv("STEPS_LOG", str(folder / "steps.log"))
    capfd.readouterr()
    step = ReplayedStep(folder / "bundle" / "replay.py")
    assert "loss" not in capfd.readouterr().out  # the script's prints: none
    assert (folder / "steps.log").read_text().count("\n") == steps  # its loop did not run
    net = step.models["Net"]
    assert net.head.weight is net.block.fc.weight and net.block.act is torch.tanh
    step().backward()
    for name, param in net.named_parameters():  # the stopped step's own gradients, from torch's backward
        torch.testing.assert_close(param.grad, truth[name], equal_nan=True, rtol=1e-6, atol=1e-7)
    assert net.seen.item() >= 1  # a buffer comes back with its value


@pytest.mark.parametrize("command", [["grads"], ["trace", "--flow"]])
def test_grads_and_trace_read_the_bundle_and_the_script_prints_nothing(saved, command):
    folder, _, steps = saved
    runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1", "STEPS_LOG": str(folder / "steps.log")})
    done = runner.invoke(app, [command[0], f"{folder / 'bundle' / 'replay.py'}:step", *command[1:]])
    assert done.exit_code == 1, done.output  # the step's gradients are not finite
    assert "NONFINITE" in done.stdout or "not finite" in done.stdout
    assert "step 0 loss" not in done.output and (folder / "steps.log").read_text().count("\n") == steps


def test_a_model_that_is_not_data_is_named_in_the_message(tmp_path, monkeypatch):
    script = tmp_path / "lambda.py"
    script.write_text(SCRIPT.format(steps=12, bad=BAD).replace("self.shared = None", "self.shared = lambda t: t"))
    monkeypatch.setenv("STEPS_LOG", str(tmp_path / "steps.log"))
    watch_script(Script(str(script), None), WatchOptions(save=tmp_path / "bundle"))
    summary = json.loads((tmp_path / "bundle" / "step.json").read_text())
    assert "the model['Net'].block.shared is" in summary["models_not_saved"]
    runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})
    done = runner.invoke(app, ["grads", f"{tmp_path / 'bundle' / 'replay.py'}:step"])
    assert done.exit_code == 2 and "block.shared" in done.output and "lambda" in done.output


def test_a_class_the_script_defines_only_under_main_is_named(tmp_path, monkeypatch):
    script = tmp_path / "guarded.py"
    body = SCRIPT.format(steps=12, bad=BAD)
    head, loop = body.split("torch.manual_seed(0)")
    script.write_text(head.split("class Block")[0] + 'if __name__ == "__main__":\n' + textwrap.indent(
        "class Block" + head.split("class Block")[1] + "torch.manual_seed(0)" + loop, "    "))
    monkeypatch.setenv("STEPS_LOG", str(tmp_path / "steps.log"))
    watch_script(Script(str(script), None), WatchOptions(save=tmp_path / "bundle"))
    runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})
    done = runner.invoke(app, ["grads", f"{tmp_path / 'bundle' / 'replay.py'}:step"])
    assert done.exit_code == 2 and "needs Net, which is not among the training script's definitions" in done.output
