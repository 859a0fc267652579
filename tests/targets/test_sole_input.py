"""A model whose forward takes one input (`nn.Sequential.forward(input)`) takes the one --var
that names no parameter of it, in grads, memory, compare and trace; the header names the
binding, and an ambiguous case stays exit 2 with the signature. The truth is torch's own run
of the same model on the same written-out input."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

MODEL = '''
import torch
from torch import nn


def mlp3():
    return nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.Linear(5, 3))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, a, b):
        return self.fc(a) * self.fc(b)
'''
X = [[0.5, -1.0, 2.0, 0.25, -0.75, 1.5], [1.0, 0.0, -2.0, 0.5, 0.125, -1.25]]
SEED = 7
LOSS = "out.pow(2).mean()"


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "seq_models.py"
    path.write_text(MODEL)
    return path


def _torch_run(path):
    """torch's own run: the factory under the seed gradcli uses, the same x, the same loss."""
    spec = importlib.util.spec_from_file_location("seq_models_truth", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(SEED)
    model = module.mlp3()
    loss = model(torch.tensor(X)).pow(2).mean()
    loss.backward()
    return model, loss


def _args(path, *extra):
    return (f"{path}:mlp3", "--var", f"x={X}", "--loss", LOSS, "--seed", str(SEED), *extra)


def test_grads_binds_x_to_sequential_input_and_says_so(cli, models):
    model, loss = _torch_run(models)
    text = cli("grads", *_args(models))
    assert text.exit_code == 0, text.stderr
    assert "--var x → input" in text.stdout.splitlines()[0]
    document = json.loads(cli("grads", *_args(models, "--json")).stdout)
    assert document["loss"] == pytest.approx(loss.item(), rel=1e-6)
    norms = {p["name"]: p["grad_norm"] for p in document["parameters"]}
    for name, parameter in model.named_parameters():
        assert norms[name] == pytest.approx(parameter.grad.norm().item(), rel=1e-5)


def test_trace_binds_x_and_keeps_the_user_s_name_for_the_leaf(cli, models):
    model, loss = _torch_run(models)
    result = cli("trace", *_args(models, "--json"))
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["target"]["found"].endswith("--var x → input")
    assert document["result"]["value"] == pytest.approx(loss.item(), rel=1e-6)
    leaves = {leaf["name"]: leaf for leaf in document["leaves"]}
    assert leaves["x"]["value"] == X
    weight = torch.tensor(leaves["0.weight"]["grad"])
    torch.testing.assert_close(weight, model[0].weight.grad, rtol=1e-5, atol=1e-7)


def test_memory_binds_x(cli, models):
    _, loss = _torch_run(models)
    result = cli("memory", *_args(models, "--json"))
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["found"].endswith("--var x → input")
    assert document["loss"] == pytest.approx(loss.item(), rel=1e-6)


def test_compare_binds_x(cli, models):
    _, loss = _torch_run(models)
    text = cli("compare", *_args(models))
    assert text.exit_code == 0, text.stderr
    assert "--var x → input" in text.stdout.splitlines()[0]
    document = json.loads(cli("compare", *_args(models, "--json")).stdout)
    assert document["loss"]["reference"] == pytest.approx(loss.item(), rel=1e-6)


def test_a_loss_that_reads_x_too_still_gets_it_bound(cli, models):
    spec = importlib.util.spec_from_file_location("seq_models_truth2", models)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(SEED)
    x = torch.tensor(X)
    expected = (module.mlp3()(x).pow(2).mean() + x.mean()).item()
    result = cli("memory", f"{models}:mlp3", "--var", f"x={X}", "--loss", "out.pow(2).mean() + x.mean()",
                 "--seed", str(SEED), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["loss"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("variables", [
    ["x=randn(2, 6)", "y=randn(2, 6)"],  # two names, one input: which is it?
])
def test_two_unknown_names_stay_an_error_with_the_signature(cli, models, variables):
    args = [arg for v in variables for arg in ("--var", v)]
    result = cli("grads", f"{models}:mlp3", *args, "--loss", LOSS)
    assert result.exit_code == 2
    assert "has no input 'x'" in result.stderr and "its signature: (input)" in result.stderr
    assert "Traceback" not in result.stderr


def test_two_inputs_stay_an_error_with_the_signature(cli, models):
    result = cli("grads", f"{models}:TwoInputs", "--var", "x=randn(2, 6)", "--var", "b=randn(2, 6)", "--loss", LOSS)
    assert result.exit_code == 2
    assert "has no input 'x'" in result.stderr and "its signature: (a, b)" in result.stderr
