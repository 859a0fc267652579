"""Which rows of the batch carry a stopped or flagged step (gradcli/watcher/rows/).

Each truth comes from the same loop run without gradcli: at the bad step (before it is applied)
each row's gradient is taken with torch by a plain loop over the rows (the gradient of that row's
share of the loss, through the whole batch's forward), each row's loss from the loss with
`reduction="none"`, and the previous step's weights are copied in the loop itself.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import gradcli

AT = 12  # the step whose batch holds the corrupted row
ROW = 7
STEPS = AT + 1


def build(norm: bool) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    layers = [nn.Linear(8, 32), *([nn.BatchNorm1d(32)] if norm else []), nn.ReLU(), nn.Linear(32, 2)]
    model = nn.Sequential(*layers)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def batch(step: int, fault: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 8, generator=g)
    y = x[:, :2] * torch.tensor([1.0, -1.0])
    if step == AT:
        if fault == "scaled":
            x[ROW] *= 1e4  # one sample scaled by 1e4
        elif fault == "label":
            y[ROW] = 1e3  # one target far outside the others' range
        elif fault == "inf":
            x[ROW, 1] = float("inf")
    return x, y


def train(norm: bool, fault: str, before_step=None) -> None:
    model, optimizer = build(norm)
    for step in range(1, STEPS + 1):
        x, y = batch(step, fault)
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        if before_step is not None:
            before_step(step, model, x, y)
        optimizer.step()


def torch_truth(norm: bool, fault: str) -> dict:
    """The plain loop: at step AT, each row's gradient norm and loss, and the batch's loss and
    gradient norm at the weights before step AT-1 was applied."""
    truth: dict = {}

    def before(step, model, x, y):
        if step == AT - 1:
            truth["previous_weights"] = {k: v.clone() for k, v in model.state_dict().items()}
        if step != AT:
            return
        params = [p for p in model.parameters()]
        buffers = {k: v.clone() for k, v in model.named_buffers()}
        norms = []
        for row in range(x.shape[0]):  # each row's share of the mean loss, through the batch's forward
            each = F.mse_loss(model(x), y, reduction="none")
            grads = torch.autograd.grad(each[row].sum() / each.numel(), params)
            norms.append(math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads)))
        model.load_state_dict({**model.state_dict(), **buffers})
        truth["norms"] = norms
        with torch.no_grad():
            truth["losses"] = F.mse_loss(model(x), y, reduction="none").mean(1).tolist()
        model.load_state_dict({**model.state_dict(), **buffers})
        previous, _ = build(norm)
        previous.load_state_dict(truth["previous_weights"])
        previous.train()
        loss = F.mse_loss(previous(x), y)
        grads = torch.autograd.grad(loss, list(previous.parameters()))
        truth["previous_loss"] = float(loss.detach())
        truth["previous_norm"] = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))

    train(norm, fault, before)
    return truth


def watched(norm: bool, fault: str, **options) -> gradcli.WatchResult:
    with gradcli.watch(**options) as w:
        try:
            train(norm, fault)
        except gradcli.WatchStop:
            pass
    return w.result


def flagged_rows(result) -> dict:
    found = [f for f in result.findings if "rows" in f.detail]
    assert len(found) == 1 and found[0].step == AT, [(f.kind, f.step) for f in result.findings]
    return found[0].detail["rows"]


def assert_rows_agree(rows: dict, truth: dict) -> None:
    (call,) = rows["calls"]
    assert call["batch"] == call["rows"] == 32
    assert call["grad_norms"] == pytest.approx(truth["norms"], rel=1e-4, abs=1e-9)
    assert call["losses"] == pytest.approx(truth["losses"], rel=1e-5)
    assert rows["top"][0]["row"] == max(range(32), key=truth["norms"].__getitem__) == ROW
    assert rows["top_share"] > 0.99
    assert rows["sums_to"] < 1e-5  # the rows' gradients add up to the step's


@pytest.mark.parametrize("fault", ["scaled", "label"])
def test_a_corrupted_row_is_named_by_torch_func(fault):
    truth = torch_truth(False, fault)
    rows = flagged_rows(watched(False, fault))
    assert rows["how"] == "vmap"
    assert_rows_agree(rows, truth)
    previous = rows["previous"]  # the same batch at the previous weights: as bad (bad data, not a bad state)
    assert previous["loss"] == pytest.approx(truth["previous_loss"], rel=1e-4)
    assert previous["grad_norm"] == pytest.approx(truth["previous_norm"], rel=1e-3)
    assert previous["harmless"] is False


def test_batchnorm_rows_meet_so_each_row_is_replayed():
    truth = torch_truth(True, "label")
    rows = flagged_rows(watched(True, "label"))
    assert rows["how"] == "per_row"
    assert_rows_agree(rows, truth)


def test_a_nonfinite_stop_names_its_row_in_the_json_and_the_bundle(tmp_path):
    bad = []

    def before(step, model, x, y):
        if step == AT:
            for row in range(x.shape[0]):
                each = F.mse_loss(model(x[row:row + 1]), y[row:row + 1])
                grads = torch.autograd.grad(each, list(model.parameters()))
                if not all(bool(torch.isfinite(g).all()) for g in grads):
                    bad.append(row)

    train(False, "inf", before)
    result = watched(False, "inf", save=tmp_path)
    assert result.stop.step == AT
    rows = result.as_dict()["stop"]["rows"]
    assert [r["row"] for r in rows["top"]] == bad == [ROW]
    assert rows["calls"][0]["grad_norms"][ROW] == "nan"
    saved = json.loads((tmp_path / "step.json").read_text())
    assert saved["stop"]["rows"]["top"] == rows["top"]
    from gradcli.watcher.bundle import load_bundle

    assert load_bundle(tmp_path)["rows"]["top"][0]["row"] == ROW  # in step.pt too, read as data (weights_only)


def test_a_spike_from_the_weights_is_harmless_at_the_previous_weights():
    """From step 11 the learning rate is 200 times larger: step 11's ordinary gradient makes a huge
    update, and step 12's ordinary batch spikes (the first spike: a continuing spike is one
    warning). At the weights before step 11 that batch is harmless: the state, not the data."""

    def loop(before_step=None):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        for step in range(1, 13):
            x, y = batch(step, "none")
            if step == 11:
                for group in optimizer.param_groups:
                    group["lr"] = 2.0
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            if before_step is not None:
                before_step(step, model, x, y)
            optimizer.step()
        return model

    truth: dict = {}

    def before(step, model, x, y):
        if step == 11:
            truth["weights"] = {k: v.clone() for k, v in model.state_dict().items()}
        if step == 12:
            previous = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
            previous.load_state_dict(truth["weights"])
            loss = F.mse_loss(previous(x), y)
            grads = torch.autograd.grad(loss, list(previous.parameters()))
            truth["loss"] = float(loss.detach())
            truth["norm"] = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))

    unwatched = loop(before).state_dict()
    with gradcli.watch() as w:
        watched_model = loop()
    assert all(torch.equal(v, unwatched[k]) for k, v in watched_model.state_dict().items())  # the rows changed nothing
    rows = {f.step: f.detail["rows"] for f in w.result.findings if "rows" in f.detail}
    assert 11 not in rows  # step 11's gradient was ordinary: its update was not
    previous = rows[12]["previous"]  # the ordinary batch after it, at the weights before step 11
    assert previous["loss"] == pytest.approx(truth["loss"], rel=1e-4)
    assert previous["grad_norm"] == pytest.approx(truth["norm"], rel=1e-3)
    assert previous["grad_norm"] < previous["typical_grad_norm"] and previous["harmless"] is True
