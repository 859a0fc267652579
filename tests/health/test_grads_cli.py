"""`gradcli grads` through the CLI: exit statuses for CI, the table, --json, --plot, --depth,
--steps, and bad input as a one-paragraph error with exit 2."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from paths import ROOT


FAULTS = str(ROOT / "examples" / "grads" / "faults.py")
HEALTHY = str(ROOT / "examples" / "grads" / "healthy.py")
SQUARE = ["--loss", "out.pow(2).mean()"]


def grads(cli, *args: str):
    return cli("grads", *args)


def test_a_detached_branch_fails_ci_with_the_reason(cli):
    result = grads(cli, f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--seed", "0")
    assert result.exit_code == 1
    assert "nn.Module subclass DetachedBranch, constructed as DetachedBranch(); seed 0" in result.stdout
    assert "skip.weight, skip.bias: NO GRAD: its output reaches the loss only through .detach() at faults.py:" in result.stdout
    assert result.stdout.rstrip().endswith("PROBLEM: 2 NO GRAD (of 6 parameters that should learn)")
    assert result.stderr == ""


def test_a_healthy_model_passes(cli):
    result = grads(cli, f"{HEALTHY}:MLP", "--var", "x=randn(64, 32)", *SQUARE, "--strict")
    assert result.exit_code == 0, result.stdout
    assert "OK: all 6 parameters that should learn get a finite gradient" in result.stdout


def test_strict_fails_on_zero(cli):
    args = (f"{FAULTS}:DeadReLU", "--var", "x=randn(16, 8)", *SQUARE)
    relaxed, strict = grads(cli, *args), grads(cli, *args, "--strict")
    assert relaxed.exit_code == 0 and "ZERO (warning): the relu right after it is dead" in relaxed.stdout
    assert strict.exit_code == 1 and "PROBLEM: 5 ZERO" in strict.stdout


def test_init_and_thresholds_reach_the_model(cli):
    args = (f"{FAULTS}:DeepMLP", "--init", "std=1.5", "--var", "x=randn(64, 64)", *SQUARE)
    exploding = grads(cli, *args, "--strict")
    assert exploding.exit_code == 1 and "EXPLODING" in exploding.stdout
    lenient = grads(cli, *args, "--strict", "--explode", "1e20", "--spread", "1e20")
    assert lenient.exit_code == 0, lenient.stdout


def test_json_document(cli):
    result = grads(cli, f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--seed", "3", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert list(document) == [
        "target", "found", "seed", "model", "loss", "ok", "strict", "thresholds", "median_ratio", "parameters",
        "modules", "nonfinite_origin", "steps", "error", "problems", "warnings", "notes",
    ]
    assert document["ok"] is False and document["seed"] == 3
    assert [p["name"] for p in document["parameters"]] == [
        "main.weight", "main.bias", "skip.weight", "skip.bias", "head.weight", "head.bias"]
    skip = document["parameters"][2]
    assert skip["flags"] == ["NO GRAD"] and skip["grad_norm"] is None
    assert skip["findings"][0]["source"]["code"] == "skip = self.skip(x).detach()"
    assert [m["path"] for m in document["modules"]] == ["main", "skip", "head"]
    assert document["modules"][1]["flags"] == ["NO GRAD"]
    head = document["parameters"][4]
    assert head["ratio"] == pytest.approx(head["grad_norm"] / head["param_norm"])


def test_json_matches_a_hand_written_backward(cli):
    sys.path.insert(0, str(ROOT / "examples" / "grads"))
    import healthy

    result = grads(cli, f"{HEALTHY}:MLP", "--var", "x=randn(8, 32)", *SQUARE, "--seed", "5", "--json")
    document = json.loads(result.stdout)
    torch.manual_seed(5)  # as grads: the seed drives the initialisation
    model = healthy.MLP()
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(5), dtype=torch.float64).float()  # as --var
    model(x).pow(2).mean().backward()
    for p in document["parameters"]:
        assert p["grad_norm"] == pytest.approx(model.get_parameter(p["name"]).grad.norm().item(), rel=1e-5)


def test_nonfinite_in_json_is_a_string(cli):
    result = grads(cli, f"{FAULTS}:LogOfSoftmax", "--var", "x=randn(16, 8)", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["parameters"][0]["grad_norm"] == "nan"
    assert document["nonfinite_origin"]["backward_node"] == "LogBackward0"
    assert document["nonfinite_origin"]["backward_source"]["code"] == "return -torch.log(probs[:, 0]).mean()"


def test_an_infinite_loss_with_finite_gradients_exits_1(cli):
    """`out.sum() + 1e39` overflows float32 to inf; its gradient (ones) stays finite."""
    loss = torch.randn(16, 8).sum() + 1e39
    assert loss.dtype == torch.float32 and not bool(torch.isfinite(loss)), "the premise"
    args = (f"{HEALTHY}:MLP", "--var", "x=randn(16, 32)", "--loss", "out.sum() + 1e39", "--seed", "0")
    text, document = grads(cli, *args), grads(cli, *args, "--json")
    assert text.exit_code == 1 and document.exit_code == 1
    assert "loss: NONFINITE: the loss is inf" in text.stdout
    assert text.stdout.rstrip().endswith("PROBLEM: the loss is inf, though all 6 parameters that should learn get a finite gradient")
    data = json.loads(document.stdout)
    assert data["ok"] is False and data["loss"] == "inf"
    assert data["problems"] == ["loss: NONFINITE: the loss is inf; forward's output is finite: the loss made it"]


def test_depth_folds_deeper_modules(cli):
    result = grads(cli, f"{FAULTS}:DeepMLP", "--init", "depth=5", "--var", "x=randn(8, 64)", *SQUARE, "--depth", "1")
    assert result.exit_code == 0
    assert "layers (Sequential), 5 modules folded" in result.stdout
    assert "layers.0 (Linear)" not in result.stdout


def test_steps_show_a_sparkline_and_leave_the_file_alone(cli, tmp_path):
    result = grads(cli, f"{HEALTHY}:MLP", "--var", "x=randn(16, 32)", *SQUARE, "--steps", "5", "--lr", "0.1")
    assert result.exit_code == 0
    assert "5 SGD steps (lr 0.1) on a copy, same batch; losses:" in result.stdout
    assert any(mark in result.stdout for mark in "▁▂▃▄▅▆▇█")
    document = json.loads(grads(cli, f"{HEALTHY}:MLP", "--var", "x=randn(16, 32)", *SQUARE, "--steps", "5", "--json").stdout)
    assert document["steps"]["count"] == 5 and all(len(p["steps"]) == 5 for p in document["parameters"])
    losses = document["steps"]["losses"]
    assert losses[-1] < losses[0]  # plain SGD on one batch goes down


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_plot_is_written(cli, tmp_path, suffix):
    path = tmp_path / f"grads.{suffix}"
    result = grads(cli, f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--plot", str(path))
    assert result.exit_code == 1
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") if suffix == "png" else b"<svg" in data[:400]
    if suffix == "svg":
        assert b"no grad" in data  # the NO GRAD layer is marked, not drawn as 0


@pytest.mark.parametrize(("args", "message"), [
    ([f"{FAULTS}:Nope", "--var", "x=randn(2, 8)"], "has no 'Nope'"),
    (["missing.py:Net"], "no file 'missing.py'"),
    ([f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)"], "the loss must be a floating-point scalar"),
    ([f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--plot", "g.gif"], "cannot tell the picture format"),
    ([f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--vanish", "0"], "--vanish must be a positive"),
    ([f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--depth", "-1"], "--depth must be 0 or more"),
    ([f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--steps", "2", "--lr", "0"], "--lr must be"),
    ([f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 3)", *SQUARE], "DetachedBranch raised RuntimeError"),
    ([f"{FAULTS}:DetachedBranch"], "needs the input 'x'"),
    ([str(ROOT / "examples" / "swish.py") + ":Swish", "--var", "x=randn(3)"], "grads judges a model's parameters"),
    ([f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--steps", "100000"], "--steps 100,000 is beyond the limit of 1,000"),
    ([f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--lr", "nan", "--steps", "1"], "--lr must be a positive finite number"),
    ([f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", "--loss", "sigmod(out)"], "unknown function 'sigmod'"),
    # --lr without --steps was silently ignored: the user believed a learning rate was used.
    ([f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--lr", "0.1"], "--lr is the learning rate of --steps"),
])
def test_bad_input_is_exit_2_with_one_paragraph(cli, args, message):
    result = grads(cli, *args)
    assert result.exit_code == 2, result.stdout
    assert message in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_a_user_error_shows_the_users_frame_only(cli):
    result = grads(cli, f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 3)", *SQUARE)
    assert 'faults.py", line' in result.stderr and "main = torch.relu(self.main(x))" in result.stderr
    assert "gradcli/" not in result.stderr


def test_a_package_module_target(cli):
    result = grads(cli, "torch.nn:Linear", "--init", "in_features=3", "--init", "out_features=2",
                   "--var", "input=randn(4, 3)", "--loss", "out.pow(2).mean()")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "(model) (Linear)" in result.stdout


def test_labels_for_the_loss_and_dtype(cli):
    result = grads(cli, f"{HEALTHY}:MLP", "--var", "x=randn(64, 32)", "--var", "y=randint(0, 10, (64,))",
                   "--loss", "cross_entropy(out, y)", "--dtype", "float64", "--strict", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["ok"] and document["loss"] == pytest.approx(2.3, abs=0.3)  # about log(10) at initialisation


def test_an_autograd_error_is_exit_1_and_points_to_trace(cli):
    result = grads(cli, str(ROOT / "examples" / "residual_mlp.py") + ":ResidualMLP", "--var", "x=randn(4,4)", *SQUARE)
    assert result.exit_code == 1
    assert "backward raised: one of the variables needed for gradient computation has been modified by an inplace operation" in result.stdout
    assert "gradcli trace with the same target and options explains it" in result.stdout
    assert result.stdout.rstrip().endswith("PROBLEM: backward raised an error, so no parameter got a gradient")


def test_a_model_that_prints_keeps_json_parseable(cli, tmp_path):
    # The user's print goes to stderr under --json: stdout is one document and nothing else.
    (tmp_path / "chatty_grads_model.py").write_text(
        "from torch import nn\n\n\nclass Chatty(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.fc = nn.Linear(3, 2)\n\n"
        "    def forward(self, x):\n        print('batch of', x.shape[0])\n        return self.fc(x)\n"
    )
    result = grads(cli, f"{tmp_path / 'chatty_grads_model.py'}:Chatty", "--var", "x=randn(5, 3)", *SQUARE, "--json")
    assert result.exit_code == 0
    assert [p["name"] for p in json.loads(result.stdout)["parameters"]] == ["fc.weight", "fc.bias"]
    assert "batch of 5" in result.stderr


def test_a_model_without_parameters_is_refused_rather_than_passed(cli):
    # "OK: all 0 parameters that should learn get a finite gradient", exit 0, passed CI on nothing.
    result = grads(cli, "torch.nn:ReLU", "--var", "input=randn(4, 3)", "--loss", "out.sum()")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: torch.nn:ReLU is nn.Module subclass ReLU, constructed as ReLU(), which has "
                                    "no parameters: grads judges a model's parameters\n")
    assert result.stdout == ""


TOKEN_MODEL = '''
from typing import Optional

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10)

    def forward(self, input_ids: Optional[torch.LongTensor] = None):
        return self.head(torch.tanh(self.embed(input_ids)))
'''


@pytest.mark.parametrize("future", [False, True])
def test_token_ids_written_out_for_a_long_tensor_parameter(cli, tmp_path, future):
    # transformers annotate `input_ids: Optional[torch.LongTensor]`: integers written out are
    # token ids (a long tensor), not floats an embedding refuses; with `from __future__ import
    # annotations` the annotation is text, read the same way.
    name = f"token_lm_{int(future)}"
    (tmp_path / f"{name}.py").write_text(("from __future__ import annotations\n" if future else "") + TOKEN_MODEL)
    ids = [[1, 2, 3], [7, 8, 9]]
    result = grads(cli, f"{tmp_path / name}.py:TinyLM", "--var", f"input_ids={ids}", *SQUARE, "--seed", "3", "--json")
    assert result.exit_code == 0, result.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        module = __import__(name)
    finally:
        sys.path.remove(str(tmp_path))
    torch.manual_seed(3)  # as grads: the seed drives the initialisation
    model = module.TinyLM()
    model(torch.tensor(ids)).pow(2).mean().backward()
    for p in json.loads(result.stdout)["parameters"]:
        assert p["grad_norm"] == pytest.approx(model.get_parameter(p["name"]).grad.norm().item(), rel=1e-5)
