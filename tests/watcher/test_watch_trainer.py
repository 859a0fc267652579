"""gradcli.callbacks.TrainerCallback inside the real transformers Trainer (CPU), on a small
GPT-2 built from its config (no download).

The fault is the one HF users meet: a hand-written masked mean of the token losses, 0/0 on a
sample whose labels are all -100. The truth is the same training run without gradcli: a plain
TrainerCallback reads, at the same `on_pre_optimizer_step`, whether the gradients are finite
(torch.isfinite) and keeps the weights before each update; the unwatched run's log shows what
`logging_nan_inf_filter` hides (a finite logged loss while the weights turn nan).
"""

from __future__ import annotations

import inspect
import logging
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import gradcli  # noqa: E402
from gradcli.callbacks import TrainerCallback  # noqa: E402

SAMPLES, BATCH, LENGTH = 24, 4, 12


def masked_mean(outputs, labels, num_items_in_batch=None):
    """Each sample's mean token loss over its labelled tokens: 0/0 when none is labelled."""
    logits, target = outputs.logits[:, :-1], labels[:, 1:]
    mask = (target != -100).float()
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.clamp(min=0).reshape(-1),
                                           reduction="none").view(target.shape)
    return ((ce * mask).sum(1) / mask.sum(1)).mean()


class Tokens(torch.utils.data.Dataset):
    def __init__(self, masked: int | None):
        self.ids = torch.randint(0, 64, (SAMPLES, LENGTH), generator=torch.Generator().manual_seed(0))
        self.masked = masked

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        labels = self.ids[i].clone()
        if i == self.masked:
            labels[:] = -100
        return {"input_ids": self.ids[i], "labels": labels}


class Truth(transformers.TrainerCallback):
    def __init__(self):
        self.steps = []  # (gradients finite, weights before the update)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
        self.steps.append((finite, {k: v.detach().clone() for k, v in model.state_dict().items()}))


def train(callback, masked, tmp_path):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=BATCH,
                                          num_train_epochs=1, logging_steps=1, report_to=[], save_strategy="no",
                                          use_cpu=True, seed=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(masked), compute_loss_func=masked_mean,
                                   callbacks=[callback])
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        trainer.train()
    except gradcli.WatchStop as stop:
        assert stop.result is callback.result
    return model, [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_a_masked_mean_of_nothing_stops_at_torchs_step_though_the_log_stays_finite(tmp_path):
    truth = Truth()
    plain, logged = train(truth, 13, tmp_path)
    bad = [i + 1 for i, (finite, _) in enumerate(truth.steps) if not finite]
    assert bad and all(math.isfinite(v) for v in logged)  # the filter: a finite log ...
    assert not all(bool(torch.isfinite(p).all()) for p in plain.parameters())  # ... over nan weights
    callback = TrainerCallback()
    model, _ = train(callback, 13, tmp_path)
    stop = callback.result.stop
    assert stop.step == bad[0] and stop.kind == "nonfinite_loss"
    before = truth.steps[bad[0] - 1][1]
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert "transformer.h.0.mlp.c_fc.weight" in stop.parameters
    # the loss is the Trainer's compute_loss_func: compute_loss replayed names its line and cause
    lines, first = inspect.getsourcelines(masked_mean)
    assert stop.origin.file == __file__ and stop.origin.phase == "forward"
    assert stop.origin.line == first + next(i for i, text in enumerate(lines) if "/ mask.sum(1)" in text)
    assert stop.cause.kind == "division_by_zero"
    assert stop.replay.how == "replayed" and stop.replay.what == "compute_loss"


def test_a_healthy_run_ends_with_no_finding_and_the_same_weights(tmp_path):
    plain, _ = train(Truth(), None, tmp_path)
    callback = TrainerCallback()
    watched, _ = train(callback, None, tmp_path)
    result = callback.result
    assert result.stop is None and result.findings == [] and result.finished
    assert result.checks == result.steps == SAMPLES // BATCH
    for (name, a), (_, b) in zip(plain.state_dict().items(), watched.state_dict().items()):
        assert torch.equal(a, b), name


class MaskedGPT2(transformers.GPT2LMHeadModel):
    """A GPT-2 whose own forward computes the loss as the masked mean of its token losses (as a
    subclass that customises the loss does): 0/0 on a sample whose labels are all -100."""

    def forward(self, input_ids=None, labels=None, **kwargs):
        out = super().forward(input_ids=input_ids, **kwargs)
        logits, target = out.logits[:, :-1], labels[:, 1:]
        mask = (target != -100).float()
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.clamp(min=0).reshape(-1),
                                               reduction="none").view(target.shape)
        out.loss = ((ce * mask).sum(1) / mask.sum(1)).mean()
        return out


def test_a_fault_inside_the_model_stops_with_its_module_and_line(tmp_path):
    def fit(callback):
        torch.manual_seed(0)
        config = transformers.GPT2Config(vocab_size=64, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2)
        model = MaskedGPT2(config)
        args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=BATCH,
                                              num_train_epochs=1, report_to=[], save_strategy="no", use_cpu=True,
                                              seed=0, disable_tqdm=True)
        logging.getLogger("transformers").setLevel(logging.ERROR)
        try:
            transformers.Trainer(model=model, args=args, train_dataset=Tokens(13), callbacks=[callback]).train()
        except gradcli.WatchStop:
            pass
        return model

    truth = Truth()
    fit(truth)
    bad = [i + 1 for i, (finite, _) in enumerate(truth.steps) if not finite]
    callback = TrainerCallback()
    model = fit(callback)
    stop = callback.result.stop
    assert bad and stop.step == bad[0] and stop.kind == "nonfinite_loss"
    assert all(torch.equal(v, truth.steps[bad[0] - 1][1][k]) for k, v in model.state_dict().items())
    lines, first = inspect.getsourcelines(MaskedGPT2.forward)
    division = first + next(i for i, text in enumerate(lines) if "/ mask.sum(1)" in text)
    assert stop.origin.phase == "forward" and stop.origin.module == "" and stop.origin.line == division
    assert stop.origin.file == __file__ and stop.cause is not None and stop.cause.kind == "division_by_zero"
