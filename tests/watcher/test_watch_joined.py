"""One watch, never a lost stop: a Lightning fit and a Hugging Face Trainer run watched every
way a user can, and each reports a planted fault at torch's step with its line, or a healthy
run as healthy, once.

The ways: the trainer's callback alone under `python`; the callback in a script run by
`gradcli watch` (it joins the command's watch: the command reports the stop and exits 1,
each step counted once); `gradcli watch` on the script with no callback; `with
gradcli.watch():` around the fit, with and without the callback. The scripts are
examples/watch/lit_train.py and hf_train.py, run in this process as python runs them.

The truth is the same fit run without gradcli: a plain callback of the trainer reads, at the
same "before the update" event, whether the gradients are finite (torch.isfinite) and counts
the updates; the fault's line is found in the script's source.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import runpy
import sys
from pathlib import Path

import pytest
import torch
from paths import ROOT

L = pytest.importorskip("lightning")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import gradcli  # noqa: E402

EXAMPLES = ROOT / "examples" / "watch"
SCRIPTS = {"lightning": EXAMPLES / "lit_train.py", "hf": EXAMPLES / "hf_train.py"}
CALLBACK = {"lightning": "LightningCallback", "hf": "TrainerCallback"}


def load(trainer: str):
    spec = importlib.util.spec_from_file_location(f"watch_{trainer}_truth", SCRIPTS[trainer])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LightningTruth(L.Callback):
    def __init__(self):
        self.finite = []  # per update: every gradient finite

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.finite.append(all(bool(torch.isfinite(p.grad).all()) for p in pl_module.parameters() if p.grad is not None))


class HFTruth(transformers.TrainerCallback):
    def __init__(self):
        self.finite = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.finite.append(all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None))


@pytest.fixture(scope="module", params=["lightning", "hf"])
def truth(request):
    """(trainer, the first bad update (1-based), its line, the healthy run's number of updates)."""
    trainer = request.param
    script = load(trainer)
    run = script.fit if trainer == "lightning" else script.train
    bad, healthy = (LightningTruth(), LightningTruth()) if trainer == "lightning" else (HFTruth(), HFTruth())
    run([bad], True)
    run([healthy], False)
    if trainer == "lightning":
        lines, first = inspect.getsourcelines(script.Normalize.forward)
        marker = "x / x.norm"
    else:
        lines, first = inspect.getsourcelines(script.masked_mean)
        marker = "/ mask.sum(1)"
    line = first + next(i for i, text in enumerate(lines) if marker in text)
    assert all(healthy.finite) and not all(bad.finite)
    return trainer, bad.finite.index(False) + 1, line, len(healthy.finite)


def under_python(trainer: str, *flags: str):
    """`python script FLAGS` in this process: (the result, whether WatchStop left the script)."""
    saved = sys.argv[:]
    sys.argv = [str(SCRIPTS[trainer]), *flags]
    try:
        namespace = runpy.run_path(str(SCRIPTS[trainer]), run_name="__main__")
    except gradcli.WatchStop as stop:
        return stop.result, stop
    finally:
        sys.argv = saved
    return (namespace["watch"].result if "watch" in namespace else None), None


def under_gradcli_watch(trainer: str, tmp_path: Path, *flags: str):
    """`gradcli watch --json PATH script FLAGS` in this process: (exit status, document, stderr)."""
    from typer.testing import CliRunner

    from gradcli.cli import app

    out = tmp_path / f"{trainer}-{'-'.join(flags)}.json"
    done = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"}).invoke(
        app, ["watch", "-q", "--json", str(out), str(SCRIPTS[trainer]), *flags])
    return done.exit_code, json.loads(out.read_text()), done.stderr


@pytest.mark.parametrize("callback", [True, False], ids=["callback", "no-callback"])
def test_gradcli_watch_reports_the_stop_once_at_torchs_step_with_its_line(truth, callback, tmp_path):
    trainer, bad, line, _ = truth
    status, doc, stderr = under_gradcli_watch(trainer, tmp_path, "--bad", *(["--callback"] if callback else []))
    assert status == 1, stderr
    stop = doc["stop"]
    assert stop["step"] == bad and stop["kind"].startswith("nonfinite")
    assert (stop["origin"]["file"], stop["origin"]["line"]) == (str(SCRIPTS[trainer]), line)
    assert doc["steps"] == bad - 1 and doc["checks"] == bad  # each step counted once
    assert stderr.count(f"stopped at step {bad} ") == 1 and "gradcli.callbacks." not in stderr


@pytest.mark.parametrize("callback", [True, False], ids=["callback", "no-callback"])
def test_gradcli_watch_on_a_healthy_run_exits_0_with_each_step_counted_once(truth, callback, tmp_path):
    trainer, _, _, updates = truth
    status, doc, stderr = under_gradcli_watch(trainer, tmp_path, *(["--callback"] if callback else []))
    assert status == 0, stderr
    assert doc["stop"] is None and doc["findings"] == [] and doc["finished"]
    assert doc["steps"] == doc["checks"] == updates
    assert "gradcli.callbacks." not in stderr


def test_the_callback_alone_under_python_says_the_stop_before_its_exception(truth, capsys):
    trainer, bad, line, _ = truth
    result, stop = under_python(trainer, "--callback", "--bad")
    assert stop is not None and result.stop.step == bad and result.stop.origin.line == line
    name = SCRIPTS[trainer].name
    assert f"at step {bad} (" in str(stop) and f"origin {name}:{line} " in str(stop)
    assert f"cause {result.stop.cause.kind}" in str(stop)
    err = capsys.readouterr().err
    assert err.count(f"gradcli.callbacks.{CALLBACK[trainer]}:\nthe run: stopped at step {bad} ") == 1
    assert f"{name}:{line}" in err


def test_the_callback_alone_under_python_says_a_healthy_run_once_at_its_end(truth, capsys):
    trainer, _, _, updates = truth
    result, stop = under_python(trainer, "--callback")
    assert stop is None
    err = capsys.readouterr().err
    said = f"the run: finished; {updates} optimizer step(s) applied, {updates} checked, no finding"
    assert err.count(f"gradcli.callbacks.{CALLBACK[trainer]}:\n{said}") == 1


@pytest.mark.parametrize("callback", [True, False], ids=["callback", "no-callback"])
def test_a_with_block_around_the_fit_stops_at_torchs_step_with_its_line(truth, callback, capsys):
    trainer, bad, line, updates = truth
    flags = ["--with", *(["--callback"] if callback else [])]
    result, stop = under_python(trainer, *flags, "--bad")
    assert stop is not None and result.stop.step == bad
    if trainer == "hf" and not callback:
        # the loss is the Trainer's compute_loss_func, which only the callback runs again (and the
        # command's rerun of a script, which a with-block has not): the report says where it is not
        assert result.stop.origin is None and "in the loss" in result.stop.replay.why_not
    else:
        assert result.stop.origin.line == line
    assert result.steps == bad - 1 and result.checks == bad
    healthy, stop = under_python(trainer, *flags)
    assert stop is None and healthy.stop is None and healthy.findings == []
    assert healthy.steps == healthy.checks == updates
    assert "gradcli.callbacks." not in capsys.readouterr().err  # joined: the with-block's owner has the result


def test_a_run_that_raised_leaves_no_watch_for_the_next_run_to_join(truth):
    # The HF Trainer has no event for an exception: the callback's watch stays installed.
    trainer, _, _, updates = truth
    if trainer != "hf":
        pytest.skip("Lightning's on_exception closes the callback's watch")
    from gradcli.callbacks import TrainerCallback
    from gradcli.watcher.session import current

    script = load("hf")
    backward = torch.autograd.backward

    class Broken(script.Tokens):
        served = 0

        def __getitem__(self, i):
            Broken.served += 1
            if Broken.served > 2 * script.BATCH:
                raise RuntimeError("the data ran out")
            return super().__getitem__(i)

    tokens, script.Tokens = script.Tokens, Broken
    try:
        with pytest.raises(RuntimeError, match="the data ran out"):
            script.train([TrainerCallback()], False)
    finally:
        script.Tokens = tokens
    assert current() is not None  # left behind
    callback = TrainerCallback()
    script.train([callback], False)
    assert callback.result.finished and callback.result.steps == callback.result.checks == updates
    assert current() is None and torch.autograd.backward is backward


TRUTH_UNDER_TORCHRUN = '''
import json, os, sys
import importlib.util
import lightning as L
import torch

spec = importlib.util.spec_from_file_location("lit_train", sys.argv[1])
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


class Truth(L.Callback):
    finite = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.finite.append(all(bool(torch.isfinite(p.grad).all()) for p in pl_module.parameters()))


script.fit([Truth()], True, ddp=True)
with open(sys.argv[2] + "." + os.environ["RANK"], "w") as out:
    json.dump(Truth.finite, out)
'''


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without torch.distributed")
def test_the_callback_under_gradcli_watch_under_torchrun_stops_both_ranks_at_torchs_step(tmp_path):
    import os
    import shutil
    import subprocess

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    root = ROOT
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    launch = [torchrun, "--standalone", "--nproc-per-node", "2", "--monitor-interval", "5"]
    driver = tmp_path / "truth.py"
    driver.write_text(TRUTH_UNDER_TORCHRUN)
    plain = subprocess.run([*launch, str(driver), str(SCRIPTS["lightning"]), str(tmp_path / "truth")],
                           capture_output=True, text=True, env=env, timeout=600)
    assert plain.returncode == 0, plain.stderr[-3000:]
    finite = [json.loads((tmp_path / f"truth.{r}").read_text()) for r in (0, 1)]  # torch: DDP's averaged gradients
    bad = next(i + 1 for i, (a, b) in enumerate(zip(*finite)) if not (a and b))
    watched = subprocess.run([*launch, "-m", "gradcli", "watch", "-q", "--json", str(tmp_path / "watch.json"),
                              str(SCRIPTS["lightning"]), "--callback", "--bad", "--ddp"],
                             capture_output=True, text=True, env=env, timeout=600)
    assert watched.returncode != 0
    docs = [json.loads((tmp_path / name).read_text()) for name in ("watch.json", "watch.rank1.json")]
    assert [d["stop"]["step"] for d in docs] == [bad, bad] and [d["checks"] for d in docs] == [bad, bad]
    ranks = docs[0]["stop"]["ranks"]
    assert ranks == docs[1]["stop"]["ranks"] and len(ranks) == 1
    named = docs[ranks[0]]["stop"]["origin"]  # the rank whose loss was not finite names the line
    script = load("lightning")
    lines, first = inspect.getsourcelines(script.Normalize.forward)
    assert named["line"] == first + next(i for i, text in enumerate(lines) if "x / x.norm" in text)
