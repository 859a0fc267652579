"""gradcli.callbacks.LightningCallback inside the real lightning Trainer (CPU).

The truth comes from the same fit run without gradcli: a plain Lightning callback reads, in
the same `on_before_optimizer_step`, whether the step's losses (kept by the module) and
gradients are finite (torch.isfinite) and what the weights are before each step is applied.
The fault is a row of zeros in one batch, which a Normalize layer turns into 0/0.
"""

from __future__ import annotations

import inspect
import logging
import warnings

import pytest
import torch

L = pytest.importorskip("lightning")

from lightning.pytorch.plugins import MixedPrecision  # noqa: E402

import gradcli  # noqa: E402
from gradcli.callbacks import LightningCallback  # noqa: E402

BATCHES = 8
BAD_BATCH = 4  # 0-based: the fifth batch holds the zero row


class Normalize(torch.nn.Module):
    def forward(self, x):
        return x / x.norm(dim=1, keepdim=True)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(Normalize(), torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.losses = []

    def training_step(self, batch, index):
        x, y = batch
        loss = ((self.net(x) - y) ** 2).mean()
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class Truth(L.Callback):
    """What torch says before each update of the unwatched fit."""

    def __init__(self):
        self.steps = []  # (losses since the last step finite, gradients finite, weights before the step)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        finite_grads = all(bool(torch.isfinite(g).all()) for g in grads)
        losses = pl_module.losses
        pl_module.losses = []
        weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        self.steps.append((all(torch.isfinite(torch.tensor(losses))), finite_grads, weights))


def data(bad: bool):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8 * BATCHES, 4, generator=g), torch.randn(8 * BATCHES, 1, generator=g)
    if bad:
        x[8 * BAD_BATCH + 3] = 0
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def fit(callback, bad, precision="32-true", accumulate=1, clip=None, epochs=1):
    torch.manual_seed(0)
    model = Net()
    # precision="16-mixed" alone becomes bf16 on a CPU: float16 autocast and its GradScaler come as a plugin
    chosen = {"plugins": [MixedPrecision("16-mixed", "cpu")]} if precision == "16-mixed" else {"precision": precision}
    trainer = L.Trainer(max_epochs=epochs, callbacks=[callback], **chosen, accelerator="cpu", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accumulate_grad_batches=accumulate, gradient_clip_val=clip, num_sanity_val_steps=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("lightning").setLevel(logging.ERROR)
        try:
            trainer.fit(model, data(bad))
        except gradcli.WatchStop as stop:
            assert stop.result is callback.result
    return model


CONFIGS = [("32-true", 1, None), ("bf16-mixed", 1, None), ("16-mixed", 1, None), ("32-true", 2, 0.5)]


@pytest.mark.parametrize("precision, accumulate, clip", CONFIGS)
def test_a_fault_stops_the_fit_at_torchs_step_with_its_module_and_line(precision, accumulate, clip):
    truth = Truth()
    fit(truth, True, precision, accumulate, clip)
    scaled = precision == "16-mixed"  # a scaler's non-finite gradients under a finite loss are a skip
    bad = [i + 1 for i, (loss_ok, grads_ok, _) in enumerate(truth.steps) if not loss_ok or (not grads_ok and not scaled)]
    assert bad[0] == BAD_BATCH // accumulate + 1  # torch: the update that holds the zero row
    callback = LightningCallback()
    model = fit(callback, True, precision, accumulate, clip)
    stop = callback.result.stop
    assert stop is not None and stop.step == bad[0]
    before = truth.steps[bad[0] - 1][2]
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the bad update was not applied
    assert stop.origin.phase == "forward" and stop.origin.module == "net.0"
    assert stop.origin.line == inspect.getsourcelines(Normalize.forward)[1] + 1
    assert stop.parameters[0] == "net.1.weight"


@pytest.mark.parametrize("precision, accumulate, clip", [("32-true", 2, 0.5), ("16-mixed", 1, None)])
def test_a_healthy_fit_ends_with_no_finding_and_the_same_weights(precision, accumulate, clip):
    truth = Truth()
    plain = fit(truth, False, precision, accumulate, clip, epochs=3)
    callback = LightningCallback()
    watched = fit(callback, False, precision, accumulate, clip, epochs=3)
    result = callback.result
    assert result.stop is None and result.findings == [] and result.finished
    assert result.checks == len(truth.steps)
    skipped = sum(1 for _, grads_ok, _ in truth.steps if not grads_ok)  # torch: GradScaler's skipped steps
    assert result.skipped == skipped and (skipped >= 1) == (precision == "16-mixed")
    assert result.steps == len(truth.steps) - skipped
    for (name, a), (_, b) in zip(plain.state_dict().items(), watched.state_dict().items()):
        assert torch.equal(a, b), name


class Focal(L.LightningModule):
    """A hand-written focal loss in training_step (the usual Lightning pattern): where a row's
    logits are far apart, the softmax underflows to exactly 0 and log(0) = -inf."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 3)
        self.losses = []

    def training_step(self, batch, index):
        x, y = batch
        p = torch.softmax(self.net(x), dim=1).gather(1, y[:, None]).squeeze(1)
        loss = (-(1 - p) ** 2 * torch.log(p)).mean()
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def focal_fit(callback):
    torch.manual_seed(0)
    model = Focal()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8 * BATCHES, 4, generator=g), torch.randint(0, 3, (8 * BATCHES,), generator=g)
    row = 8 * BAD_BATCH + 3
    x[row] *= 1e4  # logits thousands apart: the target is given p = 0 unless it is the row's largest
    y[row] = int(model.net(x[row]).argmin())
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    trainer = L.Trainer(max_epochs=1, callbacks=[callback], accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("lightning").setLevel(logging.ERROR)
        try:
            trainer.fit(model, data)
        except gradcli.WatchStop:
            pass
    return model


def test_a_loss_in_training_step_is_located_at_its_line_by_replaying_training_step():
    truth = Truth()
    focal_fit(truth)
    bad = next(i + 1 for i, (loss_ok, _, _) in enumerate(truth.steps) if not loss_ok)
    assert bad == BAD_BATCH + 1  # torch: the update on the batch that holds the row
    callback = LightningCallback()
    focal_fit(callback)
    stop = callback.result.stop
    assert stop.step == bad and stop.kind == "nonfinite_loss"
    lines, first = inspect.getsourcelines(Focal.training_step)
    assert stop.origin.file == __file__
    assert stop.origin.line == first + next(i for i, text in enumerate(lines) if "torch.log(p)" in text)
    assert stop.origin.phase == "forward" and stop.cause.kind == "log_of_zero"
    assert stop.replay.how == "replayed" and stop.replay.what == "training_step"
