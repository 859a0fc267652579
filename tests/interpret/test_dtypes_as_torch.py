"""Numbers and written values get the dtypes torch gives the same text: each row is evaluated
with torch here and with gradcli's language (or --var), and dtype and value must agree.

gradcli's program dtype plays torch's default dtype (a float beside integers, a number where
torch wants a tensor); the programs here are float32, torch's default, so the texts compare
one to one."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from gradcli.interpret.to_torch import build
from gradcli.language.parser import parse
from gradcli.targets.inputs import bind_inputs
from paths import FIXTURES



def _env():
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, generator=generator)  # float32: torch's default dtype
    y = torch.randint(0, 50, (2, 3), generator=generator)
    return {"x": x, "y": y}


# gradcli's text, and the same computation written with torch.
LANGUAGE = [
    ("where(y > 25, y, -100)", lambda x, y: torch.where(y > 25, y, -100)),
    ("where(y.flatten() > 25, y.flatten(), -100)", lambda x, y: torch.where(y.flatten() > 25, y.flatten(), -100)),
    ("where(y > 25, y, 0.5)", lambda x, y: torch.where(y > 25, y, 0.5)),
    ("where(x > 0, x, -100)", lambda x, y: torch.where(x > 0, x, -100)),
    ("where(x > 0, y, x)", lambda x, y: torch.where(x > 0, y, x)),
    ("clamp(y, 0, 10)", lambda x, y: torch.clamp(y, 0, 10)),
    ("clamp(y, min=3)", lambda x, y: torch.clamp(y, min=3)),
    ("clamp(y, 0.5, 10.5)", lambda x, y: torch.clamp(y, 0.5, 10.5)),
    ("maximum(y, 3)", lambda x, y: torch.maximum(y, torch.tensor(3))),  # torch wants a tensor there
    ("minimum(y, 3)", lambda x, y: torch.minimum(y, torch.tensor(3))),
    ("maximum(y, 2.5)", lambda x, y: torch.maximum(y, torch.tensor(2.5))),
    ("maximum(x, 3)", lambda x, y: torch.maximum(x, torch.tensor(3.0))),
    ("pow(y, 2)", lambda x, y: torch.pow(y, 2)),
    ("y.pow(2)", lambda x, y: y.pow(2)),
    ("pow(2, y)", lambda x, y: torch.pow(2, y)),
    ("y + 1", lambda x, y: y + 1),
    ("1 - y", lambda x, y: 1 - y),
    ("y * 2", lambda x, y: y * 2),
    ("y ** 2", lambda x, y: y**2),
    ("2 ** y", lambda x, y: 2**y),
    ("y + 1.5", lambda x, y: y + 1.5),
    ("y / 2", lambda x, y: y / 2),
    ("-y", lambda x, y: -y),
    ("abs(y - 25)", lambda x, y: torch.abs(y - 25)),
    ("sum(y)", lambda x, y: torch.sum(y)),
    ("y.flatten()", lambda x, y: y.flatten()),
    ("exp(y)", lambda x, y: torch.exp(y)),
    ("x * y", lambda x, y: x * y),
    ("x + 1", lambda x, y: x + 1),
    ("x * 2.5", lambda x, y: x * 2.5),
]


@pytest.mark.parametrize(("text", "in_torch"), LANGUAGE, ids=[row[0] for row in LANGUAGE])
def test_the_language_gives_torch_s_dtype_and_value(text, in_torch):
    env = _env()
    expected = in_torch(**env)
    got = build(parse(text), env).output
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


# --var texts for a value the loss reads, and torch.tensor of the same text.
VARS = ["[1, 2]", "[[0], [2]]", "3", "-100", "[0.5, 2]", "2.5", "[True, False]", "[1.0, 2.0]"]


@pytest.mark.parametrize("text", VARS)
def test_a_written_var_is_what_torch_tensor_makes_of_it(text):
    def forward(x):
        return x

    bound = bind_inputs(forward, "f", ["x=randn(2)", f"t={text}"], (), {}, dtype="float32", device="cpu",
                        seed=0, data_inputs=True, loss_names=["t"])
    expected = torch.tensor(eval(text.replace("True", "True")))  # a literal; torch reads it as written
    assert bound.tensors["t"].dtype == expected.dtype
    torch.testing.assert_close(bound.tensors["t"], expected, rtol=0, atol=0)


def test_randint_is_int64_as_torch_randint_is():
    def forward(x):
        return x

    bound = bind_inputs(forward, "f", ["x=randn(2)", "t=randint(0, 5, (3,))"], (), {}, dtype="float32",
                        device="cpu", seed=0, data_inputs=True, loss_names=["t"])
    assert bound.tensors["t"].dtype == torch.randint(0, 5, (3,)).dtype


TAGGER = '''
from torch import nn


def tagger():
    return nn.Sequential(nn.Embedding(60, 16), nn.Linear(16, 60))
'''
IDS = [[3, 14, 15, 9, 26], [5, 35, 8, 9, 7]]
LABELS = [[30, 2, 59, 40, 1], [27, 18, 28, 45, 0]]
IGNORED = "cross_entropy(out.flatten(0, 1), where(y.flatten() > 25, y.flatten(), -100), ignore_index=-100)"


def test_an_ignore_index_made_with_where_reaches_cross_entropy_as_torch_s(cli, tmp_path):
    path = tmp_path / "tagger.py"
    path.write_text(TAGGER)
    result = cli("grads", f"{path}:tagger", "--var", f"ids={IDS}", "--var", f"y={LABELS}", "--loss", IGNORED,
                 "--seed", "3", "--json")
    assert result.exit_code == 0, result.stderr
    spec = importlib.util.spec_from_file_location("tagger_truth", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(3)
    model = module.tagger()
    y = torch.tensor(LABELS).flatten()
    target = torch.where(y > 25, y, -100)
    assert target.dtype == torch.int64
    loss = torch.nn.functional.cross_entropy(model(torch.tensor(IDS)).flatten(0, 1), target, ignore_index=-100)
    loss.backward()
    document = json.loads(result.stdout)
    assert document["loss"] == pytest.approx(loss.item(), rel=1e-6)
    norms = {p["name"]: p["grad_norm"] for p in document["parameters"]}
    assert norms["1.weight"] == pytest.approx(model[1].weight.grad.norm().item(), rel=1e-5)


def _kornia_target_log_softmax():
    spec = importlib.util.spec_from_file_location("kornia_focal_truth", FIXTURES / "kornia_focal.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._TargetLogSoftmax


@pytest.mark.parametrize("order", ["1", "2"])
def test_kornia_target_log_softmax_takes_an_int64_target_written_out(cli, order):
    function = _kornia_target_log_softmax()
    target = torch.tensor([[0], [2]])
    assert target.dtype == torch.int64  # what the written text is to torch
    pred = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p: function.apply(p, target, None), (pred,))
    assert torch.autograd.gradgradcheck(lambda p: function.apply(p, target, None), (pred,))
    result = cli("check-function", f"{FIXTURES / 'kornia_focal.py'}:_TargetLogSoftmax",
                 "-v", "pred=randn(2, 3)", "-v", "target=[[0],[2]]", "--order", order, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    inputs = {i["name"]: i for i in json.loads(result.stdout)["arguments"]}
    assert inputs["target"]["dtype"] == "int64" and not inputs["target"]["differentiated"]
    assert inputs["pred"]["differentiated"]


def test_written_integers_are_differentiated_only_when_nothing_else_is_and_it_is_said(cli):
    # forward(ctx, x, target) without annotations: torch.tensor of both is int64, and then nothing
    # is left to check: the first becomes the floating input, and the note says so.
    result = cli("check-function", f"{FIXTURES / 'target_functions.py'}:TargetLogSoftmax",
                 "-v", "x=[[1, 2, 3], [0, 1, 0]]", "-v", "target=[0, 2]", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    inputs = {i["name"]: i for i in document["arguments"]}
    assert inputs["x"]["dtype"] == "float64" and inputs["x"]["differentiated"]
    assert inputs["target"]["dtype"] == str(torch.tensor([0, 2]).dtype).removeprefix("torch.")
    assert any(note.startswith("x: the integers written") for note in document["notes"])


def test_a_float_tensor_annotation_keeps_written_integers_floating():
    from gradcli.interpret.annotations import argument_type
    from gradcli.interpret.variables import parse_var
    from gradcli.verify.function.inputs import value_for
    import inspect

    parameter = inspect.Parameter("a", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.FloatTensor)
    value = value_for(parse_var("a=[0, 2]"), argument_type(parameter), torch.Generator())
    assert value.is_floating_point() and value.requires_grad


def test_written_integers_a_linear_refuses_as_int64_are_floats_and_said(cli, tmp_path):
    path = tmp_path / "tagger.py"
    path.write_text(TAGGER + "\n\ndef mlp():\n    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))\n")
    x = [[1, 2, 3], [0, -1, 4]]
    with pytest.raises(RuntimeError):  # torch's own Linear refuses torch.tensor(x), int64
        torch.nn.Linear(3, 4)(torch.tensor(x))
    result = cli("memory", f"{path}:mlp", "--var", f"x={x}", "--loss", "out.pow(2).mean()", "--seed", "1", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert "--var x: the integers written are read as floats" in document["found"]
    spec = importlib.util.spec_from_file_location("tagger_truth2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(1)
    loss = module.mlp()(torch.tensor(x, dtype=torch.float32)).pow(2).mean()
    assert document["loss"] == pytest.approx(loss.item(), rel=1e-6)


@pytest.mark.parametrize(("text", "in_torch"), [
    ("y + 1.5", lambda y: y + 1.5), ("y / 2", lambda y: y / 2), ("where(y > 25, y, 0.5)", lambda y: torch.where(y > 25, y, 0.5)),
    ("y * 2.5", lambda y: y * 2.5), ("y + 1", lambda y: y + 1), ("where(y > 25, y, -100)", lambda y: torch.where(y > 25, y, -100)),
])
def test_in_a_float64_program_the_program_s_dtype_plays_torch_s_default(text, in_torch):
    env = {"x": torch.randn(2, 3, dtype=torch.float64), "y": torch.randint(0, 50, (2, 3), generator=torch.Generator().manual_seed(1))}
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        expected = in_torch(env["y"])
    finally:
        torch.set_default_dtype(previous)
    got = build(parse(text), env).output
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize(("text", "said"), [("[1, 2, 3]", True), ("2", True), ("[1.0, 2]", False), ("[0.5, 2]", False)])
def test_check_says_when_written_integers_become_floats_to_be_differentiated(cli, text, said):
    # torch.tensor of the text is int64 exactly when check must say it made floats of it
    assert (torch.tensor(eval(text)).dtype == torch.int64) is said
    result = cli("check", "x**2", "--var", f"x={text}", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    notes = json.loads(result.stdout)["notes"]
    assert any(note.startswith("x: the integers written") for note in notes) is said
