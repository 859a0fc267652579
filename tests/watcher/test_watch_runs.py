"""Healthy runs under gradcli watch: no stop, no finding, and weights bit-identical to the same
run without gradcli (watch reads, it never draws a random number or touches a tensor).

The three runs of the issue: an MLP with Adam for 300 steps, a CNN with BatchNorm and dropout
(SGD with momentum), a small Transformer language model with AdamW, warmup and gradient-norm
clipping (examples/watch/train.py). The largest robust z-score each run reached is printed
(`pytest -s`) and bounded well under the spike threshold, and so is the largest ratio of a
layer's g² to Adam's second moment: the calibration the README quotes.
"""

from __future__ import annotations

import json

import pytest
import torch

import gradcli
from gradcli.watcher.options import WatchOptions
from watch_truths import load_example



T = load_example("watch_train_runs")


@pytest.mark.parametrize("model, steps", [("mlp", 300), ("cnn", 60), ("lm", 60)])
def test_a_healthy_run_ends_with_no_finding_and_the_same_weights(tmp_path, model, steps):
    plain = T.train(model, "none", steps)
    log = tmp_path / "steps.jsonl"
    with gradcli.watch(log=log, health_every=10) as w:
        watched = T.train(model, "none", steps)
    assert w.result.stop is None and w.result.findings == [], w.result.findings
    assert w.result.checks == steps
    for (name, a), (_, b) in zip(plain.state_dict().items(), watched.state_dict().items()):
        assert torch.equal(a, b), name  # bit for bit, buffers (BatchNorm's statistics) included
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    z = [abs(r[k]) for r in records for k in ("loss_z", "grad_z") if r[k] is not None]
    ratios = [r for record in records for r in record["adam_ratios"].values()]  # Adam's runs: mlp, lm
    print(f"{model}: largest |z| over {steps} steps: {max(z):.1f}; largest layer g²/v̂: {max(ratios, default=0):.1f}")
    assert max(z) < WatchOptions().spike and max(ratios, default=0) < WatchOptions().adam_ratio
    assert bool(ratios) == (model != "cnn")  # the CNN's SGD keeps no second moment
