"""gradcli watch on the silent training bugs: no nan, no exception, and the run learns wrong.

Each bug is a small training script written top to bottom (no `__main__` guard), beside its
fixed twin (the same script with the one-line fix). The truth of each comes from torch on the
same script run without gradcli: torch's own optimizer step hooks read the gradients, the
learning rate, the model's mode and the weights at every step; torch's own warning gives a
broadcast's shapes; the lines are read from the script's text. The twin must raise nothing.
"""

from __future__ import annotations

import math
import runpy
import statistics
import warnings
from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from gradcli.watcher.options import WatchOptions
from gradcli.watcher.run import watch_script
from gradcli.watcher.script import Script

HEADER = """\
import torch
from torch import nn
torch.manual_seed(0)
X = torch.randn(512, 8)
Y = (X[:, 0] > 0).long() + (X[:, 1] > 0).long()
"""

LOOP = """\
for step in range({steps}):
    i = torch.randint(0, 512, (32,))
    opt.zero_grad()
    loss = nn.functional.cross_entropy(net(X[i]), Y[i])
    loss.backward()
    opt.step()
"""

MLP = "net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))\n"


def fixed(bug: str, wrong: str, right: str) -> tuple[str, str]:
    """A buggy script and its twin: the same script with its one line (`wrong`) fixed."""
    assert bug.count(wrong) == 1, wrong
    return bug, bug.replace(wrong, right)


SMALL = ("net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))\n"
         "opt = torch.optim.Adam(net.parameters(), lr=1e-2)\n")
CROSS_ENTROPY = "nn.functional.cross_entropy(net(X[i]), Y[i])"
VALIDATION = """\
    if step == 12:
        net.eval()
        with torch.no_grad():
            accuracy = (net(X).argmax(1) == Y).float().mean()
"""
PER_EPOCH = ("for epoch in range(3):\n" + "\n".join("    " + line for line in LOOP.format(steps=40).splitlines())
             + "\n        sched.step()\n")

#: name -> (the buggy script, the fixed twin)
SCRIPTS = {
    "carried_gradients": fixed(
        HEADER + MLP + "opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)\n"
        + LOOP.format(steps=60).replace("    opt.zero_grad()\n", ""),
        "    loss = ", "    opt.zero_grad()\n    loss = "),
    "no_optimizer": (
        HEADER + """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.body(x))


net = Net()
opt = torch.optim.Adam(net.body.parameters(), lr=1e-3)
""" + LOOP.format(steps=20), None),
    "plain_list": (
        HEADER + """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(8, 32), nn.Linear(32, 32)]
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


net = Net()
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
""" + LOOP.format(steps=20), None),
    "zeroed_before_step": (
        HEADER + MLP + "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        + LOOP.format(steps=20).replace("    opt.zero_grad()\n", "").replace(
            "    loss.backward()\n", "    loss.backward()\n    opt.zero_grad()\n"),
        None),
    "softmax_twice": fixed(
        HEADER + "net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3), nn.Softmax(dim=1))\n"
        "opt = torch.optim.Adam(net.parameters(), lr=1e-2)\n" + LOOP.format(steps=150),
        ", nn.Softmax(dim=1))", ")"),
    "sigmoid_twice": fixed(
        HEADER + SMALL + LOOP.format(steps=20).replace(
            CROSS_ENTROPY, "nn.BCEWithLogitsLoss()(torch.sigmoid(net(X[i])).squeeze(1), (Y[i] > 0).float())"),
        "torch.sigmoid(net(X[i]))", "net(X[i])"),
    "broadcast_target": fixed(
        HEADER + SMALL + LOOP.format(steps=20).replace(CROSS_ENTROPY, "nn.functional.mse_loss(net(X[i]), X[i, 0])"),
        "mse_loss(net(X[i]), ", "mse_loss(net(X[i]).squeeze(1), "),
    "eval_mode": fixed(
        HEADER + "net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3))\n"
        "opt = torch.optim.Adam(net.parameters(), lr=1e-3)\n" + LOOP.format(steps=30) + VALIDATION,
        VALIDATION, VALIDATION + "        net.train()\n"),
    "scheduler_per_batch": fixed(
        HEADER + MLP + "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.1)\n" + PER_EPOCH,
        "\n        sched.step()\n", "\n    sched.step()\n"),
}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def line_of(path: Path, text: str) -> int:
    found = [i + 1 for i, line in enumerate(path.read_text().splitlines()) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def plain(path: Path) -> dict:
    """The script run without gradcli, torch's own step pre-hook reading each step: the
    gradients (their objects and values), the learning rates, the models' modes; and the
    script's globals at the end (its model and optimizer)."""
    seen: dict = {"grads": [], "lrs": [], "training": [], "objects": []}

    def before(optimizer, args, kwargs):
        params = [p for g in optimizer.param_groups for p in g["params"]]
        seen["grads"].append([None if p.grad is None else p.grad.detach().clone() for p in params])
        seen["objects"].append([p.grad for p in params])
        seen["lrs"].append([g["lr"] for g in optimizer.param_groups])

    handle = register_optimizer_step_pre_hook(before)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seen["globals"] = runpy.run_path(str(path), run_name="__main__")
    finally:
        handle.remove()
    seen["warnings"] = [str(w.message) for w in caught]
    return seen


def watched(path: Path, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return watch_script(Script(str(path), None, ()), WatchOptions(**options))


def kinds(result) -> list[str]:
    return [f.kind for f in result.findings]


def only(result, kind: str):
    found = [f for f in result.findings if f.kind == kind]
    assert len(found) == 1, result.findings
    return found[0]


@pytest.mark.parametrize("name", [n for n, (_, twin) in SCRIPTS.items() if twin is not None])
def test_every_twin_is_clean(tmp_path, name):
    result = watched(write(tmp_path, name, SCRIPTS[name][1]))
    assert result.finished and result.ok and result.findings == [], result.findings


def test_gradients_carried_over(tmp_path):
    path = write(tmp_path, "carried", SCRIPTS["carried_gradients"][0])
    truth = plain(path)
    # torch: the .grad tensor the first step used is the one the second step uses, and the
    # second step's gradient is the first's plus the second backward's
    assert all(a is b for a, b in zip(truth["objects"][0], truth["objects"][1]))
    g1, g2 = truth["grads"][0], truth["grads"][1]
    total = math.sqrt(sum(float(g.pow(2).sum()) for g in g2))
    own = math.sqrt(sum(float((b - a).pow(2).sum()) for a, b in zip(g1, g2)))
    net = truth["globals"]["net"]
    result = watched(path)
    f = only(result, "carried_gradients")
    assert f.step == 2 and f.parameters == [n for n, _ in net.named_parameters()]
    assert f.line == line_of(path, "loss.backward()")
    assert f.detail["times"] == pytest.approx(total / own, rel=1e-4)
    assert not result.ok


def test_gradients_carried_over_are_found_at_every_third_check(tmp_path):
    """--every 3 notes the gradients only after the step before a check (step 2): the carry is
    found at step 3, with torch's step-3 gradient against what its own backward added."""
    path = write(tmp_path, "carried", SCRIPTS["carried_gradients"][0])
    truth = plain(path)
    assert all(a is b for a, b in zip(truth["objects"][1], truth["objects"][2]))
    g2, g3 = truth["grads"][1], truth["grads"][2]
    total = math.sqrt(sum(float(g.pow(2).sum()) for g in g3))
    own = math.sqrt(sum(float((b - a).pow(2).sum()) for a, b in zip(g2, g3)))
    f = only(watched(path, every=3), "carried_gradients")
    assert f.step == 3 and f.detail["times"] == pytest.approx(total / own, rel=1e-4)


def test_the_forgotten_zero_grad_loss_climbs(tmp_path):
    path = write(tmp_path, "carried", SCRIPTS["carried_gradients"][0].replace("range(60)", "range(120)"))
    losses = _losses(path)  # torch: the plain run's losses climb far above where they started
    assert sorted(losses[-10:])[5] > 10 * sorted(losses[:10])[5]
    f = only(watched(path), "loss_climbs")
    assert f.detail["times"] > 10 and f.detail["to"] > f.detail["from"]
    assert f.detail["from"] == pytest.approx(min(statistics.median(losses[i:i + 10]) for i in range(0, 50, 10)), rel=1e-6)


@pytest.mark.parametrize("name, left_out", [("no_optimizer", ["head.bias", "head.weight"]),
                                            ("plain_list", ["layers[0].bias", "layers[0].weight", "layers[1].bias",
                                                            "layers[1].weight"])])
def test_a_gradient_with_no_optimizer(tmp_path, name, left_out):
    path = write(tmp_path, name, SCRIPTS[name][0])
    truth = plain(path)
    net, opt = truth["globals"]["net"], truth["globals"]["opt"]
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    every = {f"layers[{i}].{n}": p for i, layer in enumerate(getattr(net, "layers", [])) for n, p in layer.named_parameters()}
    every.update(net.named_parameters())
    # torch: these get a gradient and no optimizer holds them
    assert sorted(n for n, p in every.items() if p.grad is not None and id(p) not in held) == left_out
    f = only(watched(path), "no_optimizer")
    assert f.parameters == left_out
    assert f.line == line_of(path, "opt = torch.optim.Adam(")
    assert f.detail["elements"] == sum(every[n].numel() for n in left_out)


def test_zero_grad_between_backward_and_step(tmp_path):
    path = write(tmp_path, "zeroed", SCRIPTS["zeroed_before_step"][0])
    truth = plain(path)
    assert all(g is None for step in truth["grads"] for g in step)  # torch: every step saw no gradient
    result = watched(path)
    f = only(result, "zeroed_before_step")
    assert f.step == 1 and f.detail["gradients_at_step"] == "None"
    assert f.line == line_of(path, "opt.zero_grad()")
    assert "no_gradient" not in kinds(result)  # the reset explains it: not a second finding


@pytest.mark.parametrize("name, activation_line, loss_line", [
    ("softmax_twice", "nn.Softmax(dim=1)", "loss = nn.functional.cross_entropy"),
    ("sigmoid_twice", "loss = nn.BCEWithLogitsLoss()", "loss = nn.BCEWithLogitsLoss()")])
def test_an_activation_applied_twice(tmp_path, name, activation_line, loss_line):
    path = write(tmp_path, name, SCRIPTS[name][0])
    result = watched(path)
    f = only(result, "activation_twice")
    assert f.step == 1
    assert f.detail["loss_line"] == f"{path}:{line_of(path, loss_line)}"
    if name == "softmax_twice":
        # torch: cross_entropy of probabilities has a floor, log(1 + 2/e) for 3 classes, that the
        # twin's logits pass
        floor = math.log(1 + 2 / math.e)
        assert min(_losses(path)) > floor > min(_losses(write(tmp_path, "twin", SCRIPTS[name][1])))
        assert f.modules == ["3"]  # the model's own Softmax module
        assert f.line == line_of(path, "loss = nn.functional.cross_entropy")  # the model's call inside Sequential
    else:
        assert f.line == line_of(path, activation_line)


def _losses(path: Path) -> list[float]:
    losses: list[float] = []
    original = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        losses.append(float(self.detach()))
        return original(self, *args, **kwargs)

    torch.Tensor.backward = backward
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        torch.Tensor.backward = original
    return losses


def test_a_loss_that_broadcasts_its_target(tmp_path):
    path = write(tmp_path, "broadcast", SCRIPTS["broadcast_target"][0])
    truth = plain(path)
    said = next(w for w in truth["warnings"] if "target size" in w)  # torch's own words
    assert "torch.Size([32])" in said and "torch.Size([32, 1])" in said
    f = only(watched(path), "broadcast_target")
    assert f.detail["output_shape"] == [32, 1] and f.detail["target_shape"] == [32]
    assert f.detail["compared_shape"] == [32, 32]
    assert f.line == line_of(path, "loss = nn.functional.mse_loss")


def test_training_in_eval_mode(tmp_path):
    path = write(tmp_path, "eval", SCRIPTS["eval_mode"][0])
    modes: list[bool] = []
    last: dict = {}

    def forward(module, args):  # torch: the mode of the model each training call ran in
        if torch.is_grad_enabled() and isinstance(module, torch.nn.Sequential):
            last["training"] = module.training

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(forward),
             register_optimizer_step_pre_hook(lambda o, a, k: modes.append(last["training"]))]
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        for hook in hooks:
            hook.remove()
    first_eval = modes.index(False) + 1  # the first step taken with the model in eval mode
    f = only(watched(path), "eval_mode")
    assert f.step == first_eval
    assert f.modules == ["2"] and f.detail["modules_in_eval"] == ["Dropout"]
    assert f.line == line_of(path, "net.eval()")


def test_a_scheduler_stepped_per_batch(tmp_path):
    path = write(tmp_path, "sched", SCRIPTS["scheduler_per_batch"][0])
    truth = plain(path)
    rates = [lrs[0] for lrs in truth["lrs"]]
    fell = next(i + 1 for i, r in enumerate(rates) if r < 1e-6 * max(rates[:i + 1]))  # torch's rates
    f = only(watched(path), "learning_rate")
    assert f.step == fell and f.detail["how"] == "collapsed"
    assert f.detail["scheduler"] == "StepLR" and f.line == line_of(path, "sched = torch.optim.lr_scheduler.StepLR")
    # torch: the scheduler stepped once after each optimizer step (its last_epoch at the end), so
    # before step k it had stepped k - 1 times: one step per batch, not per epoch
    stepped = truth["globals"]["sched"].last_epoch
    assert stepped == len(rates)
    assert f.detail["scheduler_steps"] == stepped - (len(rates) - f.detail["checked_step"] + 1)


# Ported from a public report (discuss.pytorch.org/t/cross-entropy-loss-is-not-decreasing/43814):
# a 10-class image classifier whose forward ends in softmax, trained with nn.CrossEntropyLoss;
# "the loss stays at 2.30". Synthetic data of MNIST's shapes (1x28x28, 10 classes). And its cousin,
# nn.Softmax with nn.NLLLoss (the log missing), with the twin nn.LogSoftmax + nn.NLLLoss.
REPORTED = """\
import torch
from torch import nn
import torch.nn.functional as F
torch.manual_seed(0)
images = torch.randn(256, 1, 28, 28)
targets = torch.randint(0, 10, (256,))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 5)
        self.fc = nn.Linear(8 * 12 * 12, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return {last}(self.fc(x.flatten(1)), dim=1)


net = Net()
criterion = {criterion}
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
for step in range(40):
    i = torch.randint(0, 256, (32,))
    opt.zero_grad()
    loss = criterion(net(images[i]), targets[i])
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("last, criterion, kind", [
    ("F.softmax", "nn.CrossEntropyLoss()", "activation_twice"),
    ("F.softmax", "nn.NLLLoss()", "probabilities_to_nll"),
    ("F.log_softmax", "nn.NLLLoss()", None)])
def test_the_reported_softmax_classifier(tmp_path, last, criterion, kind):
    path = write(tmp_path, "reported", REPORTED.format(last=last, criterion=criterion))
    losses = _losses(path)
    if kind == "activation_twice":  # torch: cross-entropy of probabilities never goes below log(1 + 9/e)
        assert min(losses) > math.log(1 + 9 / math.e)
    result = watched(path)
    if kind is None:
        assert result.ok and result.findings == [], result.findings
        return
    f = only(result, kind)
    assert f.step == 1 and f.line == line_of(path, f"return {last}(")
    assert f.detail["loss_line"] == f"{path}:{line_of(path, 'loss = criterion(')}"


def test_a_loss_that_never_falls_is_a_warning(tmp_path):
    """A learning rate 1e5 times too small: torch's own losses do not fall below 0.9 of where
    they started; the twin (the usual rate) does, and is clean."""
    script = HEADER + MLP + "opt = torch.optim.SGD(net.parameters(), lr={lr}, momentum=0.9)\n" + LOOP.format(steps=110)
    path = write(tmp_path, "flat", script.format(lr="1e-6"))
    losses = _losses(path)
    first = statistics.median(losses[:10])
    assert min(statistics.median(losses[i:i + 10]) for i in range(0, 110, 10)) >= 0.9 * first
    result = watched(path)
    f = only(result, "loss_flat")
    assert f.warning and f.detail["from"] == pytest.approx(first, rel=1e-6)
    twin = watched(write(tmp_path, "twin", script.format(lr="0.05")))
    assert twin.ok and twin.findings == [], twin.findings


# The same classifier compiled (aot_eager: no C++ compiler needed), with BatchNorm and dropout:
# the compiled forward is one node in the graph, so watch reads what made the loss's input from
# the model's eager original, run once on the step's own call. That run must leave nothing
# behind: the weights and buffers end bit-identical to the same script run without gradcli.
COMPILED = REPORTED.replace(
    "        self.fc = nn.Linear", "        self.norm = nn.BatchNorm2d(8)\n        self.drop = nn.Dropout(0.3)\n"
    "        self.fc = nn.Linear").replace(
    "F.relu(self.conv(x))", "F.relu(self.norm(self.conv(x)))").replace(
    "self.fc(x.flatten(1))", "self.fc(self.drop(x.flatten(1)))").replace(
    "net = Net()", 'net = torch.compile(Net(), backend="aot_eager")').replace("range(40)", "range(8)")


@pytest.mark.parametrize("last, criterion, kind", [
    ("F.softmax", "nn.CrossEntropyLoss()", "activation_twice"),
    ("F.softmax", "nn.NLLLoss()", "probabilities_to_nll"),
    ("F.log_softmax", "nn.NLLLoss()", None)])
def test_a_softmax_inside_a_compiled_model(tmp_path, last, criterion, kind):
    import gradcli

    path = write(tmp_path, "compiled", COMPILED.format(last=last, criterion=criterion))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain_net = runpy.run_path(str(path), run_name="__main__")["net"]
        with gradcli.watch() as w:
            watched_net = runpy.run_path(str(path), run_name="__main__")["net"]
    left, right = plain_net.state_dict(), watched_net.state_dict()
    assert list(left) == list(right) and "_orig_mod.norm.running_mean" in left
    for key in left:
        assert torch.equal(left[key], right[key]), key  # bit for bit, BatchNorm's statistics included
    result = w.result
    if kind is None:
        assert result.ok and result.findings == [], result.findings
        return
    f = only(result, kind)
    assert f.step == 1 and f.line == line_of(path, f"return {last}(")
