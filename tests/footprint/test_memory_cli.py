"""`gradcli memory` through the CLI: the report, --json's keys, --depth, --amp, --plot, and bad
input as a one-paragraph error with exit 2."""

from __future__ import annotations

import importlib.util
import json

import pytest
from paths import ROOT

MLP = str(ROOT / "examples" / "memory" / "mlp.py") + ":MLP"
DEEP = str(ROOT / "examples" / "memory" / "mlp.py") + ":DeepMLP"
QUICK = ("--checkpoint", "0", "--no-create-graph", "--seed", "0")


def test_the_report_names_the_lines_that_saved_the_most(cli):
    result = cli("memory", MLP, "--var", "x=randn(4, 256)", "--loss", "out.pow(2).mean()", *QUICK)
    assert result.exit_code == 0, result.stdout + result.stderr
    out = result.stdout
    # By hand: relu(fc1(x)) and relu(fc2(h)) each save a (4, 512) float32 output (8 KiB);
    # fc2 and fc3 save their weights (1 MiB, 20 KiB); fc1 saves x (4 KiB); the loss saves out.
    assert "Saved for backward: 1.04 MiB in 6 storages (16.2 KiB activations, 1.02 MiB parameters, 4 KiB inputs)" in out
    assert "mlp.py:22  h = torch.relu(self.fc2(h))        8 KiB   1.01 MiB        2" in out
    assert "--loss:1   out.pow(2).mean()                  160 B      160 B        1" in out
    assert out.rstrip().endswith("OK: backward keeps 16.2 KiB of activations alive until it runs")
    assert result.stderr == ""


def test_json_has_the_documented_keys_and_proven_checkpoints(cli):
    result = cli("memory", DEEP, "--var", "x=randn(16, 128)", "--loss", "out.pow(2).mean()", "--init", "depth=3",
                 "--checkpoint", "1", "--depth", "2", "--seed", "0", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["ok"] is True and document["saved_bytes"] > document["kept_bytes"] > 0
    assert document["peak_bytes"] >= document["baseline_bytes"] + document["kept_bytes"]
    assert document["retain_graph_keeps"] == document["kept_bytes"] and document["create_graph_adds"] > 0
    assert {"node", "module", "line", "bytes"} <= set(document["nodes"][0])
    assert {m["module"] for m in document["modules"]} <= {"blocks.0", "blocks.1", "blocks.2", "head", "(loss)"}
    (trial,) = document["checkpoint"]
    assert trial["gradients_equal"] is True and trial["time_ratio"] > 0
    assert trial["saved_bytes_before"] - trial["saved_bytes_after"] == trial["predicted_freed"]


def test_amp_shows_the_bfloat16_copies(cli):
    result = cli("memory", MLP, "--var", "x=randn(4, 256)", "--loss", "out.pow(2).mean()", "--amp", "bfloat16", *QUICK)
    assert result.exit_code == 0, result.stderr
    assert "autocast copies of parameters" in result.stdout
    assert "By dtype: bfloat16" in result.stdout


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="--plot needs matplotlib")
def test_plot_is_written(cli, tmp_path):
    path = tmp_path / "memory.png"
    result = cli("memory", MLP, "--var", "x=randn(4, 256)", "--loss", "out.pow(2).mean()", *QUICK, "--plot", str(path))
    assert result.exit_code == 0, result.stderr
    assert path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, message", [
    (("--amp", "float64"), "autocast computes in bfloat16 or float16"),
    (("--depth", "-1"), "--depth must be 0 or more"),
    (("--checkpoint", "-2"), "--checkpoint must be 0 or more"),
])
def test_bad_input_is_a_usage_error(cli, args, message):
    result = cli("memory", MLP, "--var", "x=randn(4, 256)", "--loss", "out.pow(2).mean()", *args)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_function_is_not_a_model(cli, tmp_path):
    source = tmp_path / "f.py"
    source.write_text("def f(x):\n    return x * 2\n")
    result = cli("memory", f"{source}:f", "--var", "x=randn(3)")
    assert result.exit_code == 2
    assert "memory measures what a model's forward and backward keep" in result.stderr


def test_help_names_the_options_and_an_example(cli):
    result = cli("memory", "--help")
    assert result.exit_code == 0
    assert "--checkpoint" in result.stdout and "gradcli memory examples/memory/mlp.py:MLP" in result.stdout


@pytest.mark.parametrize("command", ["memory", "compare"])
def test_loss_init_reaches_the_loss_class_as_in_grads(cli, command):
    # The model block (cli/app.py) gives memory and compare grads' --loss-init: MSELoss with
    # reduction="sum" is torch's mean times the number of elements (4 x 10 outputs here).
    model = str(ROOT / "examples" / "compare" / "models.py") + ":MLP"
    args = [command, model, "--var", "x=randn(4, 32)", "--var", "target=randn(4, 10)", "--loss", "torch.nn:MSELoss",
            "--seed", "0", "--json", *(["--checkpoint", "0", "--no-create-graph"] if command == "memory" else [])]
    losses = []
    for extra in ([], ["--loss-init", "reduction=sum"]):
        result = cli(*args, *extra)
        assert result.exit_code == 0, result.stderr
        loss = json.loads(result.stdout)["loss"]
        losses.append(loss if command == "memory" else loss["reference"])
    assert losses[1] == pytest.approx(40 * losses[0], rel=1e-6)


def test_the_saves_of_a_loss_written_in_the_language_are_torch_s(cli):
    """A --loss runs where memory's hooks do not reach (its own thread): its nodes' saves are
    read back from the nodes. Each loss node's saved shapes, dtypes and bytes against torch's
    own `_saved_*` attributes, read without hooks from the same loss written in Python."""
    import torch

    spec = importlib.util.spec_from_file_location("memory_mlp", ROOT / "examples" / "memory" / "mlp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.MLP()(torch.randn(4, 256))
    loss = (out * torch.tanh(out)).mean() + (out ** 3).sum()
    expected, seen, stack = [], set(), [loss.grad_fn]
    while stack:  # the loss's own nodes: from the loss down to forward's output
        node = stack.pop()
        if node is None or node in seen or node is out.grad_fn:
            continue
        seen.add(node)
        saved = [getattr(node, name) for name in dir(node) if name.startswith("_saved_")]
        tensors = sorted((list(t.shape), str(t.dtype).removeprefix("torch."), t.untyped_storage().nbytes())
                         for t in saved if isinstance(t, torch.Tensor))
        if tensors:
            expected.append((node.name(), tensors))
        stack.extend(fn for fn, _ in node.next_functions)

    result = cli("memory", MLP, "--var", "x=randn(4, 256)", "--loss", "(out * tanh(out)).mean() + (out ** 3).sum()",
                 *QUICK, "--json")
    assert result.exit_code == 0, result.stderr
    found = [(n["node"], sorted((t["shape"], t["dtype"], t["bytes"]) for t in n["tensors"]))
             for n in json.loads(result.stdout)["nodes"] if n["file"] == "--loss"]
    assert sorted(found) == sorted(expected) and len(found) == 3  # Mul (both operands), Tanh, Pow
