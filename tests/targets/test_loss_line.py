"""The loss line of real training code (issue 25): a causal language model's two loss lines,
model outputs read by name, your own loss (a file's function, an nn.Module loss class, a
Python callable) in trace, grads and the Python API.

The truth is torch run here: the same model (a deep copy) and the same inputs, the loss
written as a training script writes it, backward; gradcli's loss value and every parameter's
gradient must equal it.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections import OrderedDict
from typing import Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradcli
from gradcli.errors import GradcliError, UserCodeError
from paths import ROOT

sys.path.insert(0, str(ROOT / "examples" / "lm"))
from tiny_lm import TinyLM  # noqa: E402

VOCAB = 50
FLAT = "cross_entropy(out.flatten(0, 1), y.flatten())"
SHIFTED = "cross_entropy(out[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))"


def _values(text, y):
    """What each loss line reads besides the output and forward's ids."""
    return {"y": y} if text == FLAT else {"V": torch.tensor(VOCAB)}


def _flat(logits, ids, y):
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def _shifted(logits, ids, y):
    return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    model = TinyLM(vocab=VOCAB, layers=1)  # README's examples run the 2-layer one through the CLI
    ids = torch.randint(0, VOCAB, (2, 8))
    y = torch.randint(0, VOCAB, (2, 8))
    return model, ids, y


def _torch_reference(model, ids, y, loss_fn):
    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    value = loss_fn(twin(ids), ids, y)
    value.backward()
    return value.item(), {name: p.grad.clone() for name, p in twin.named_parameters()}


@pytest.mark.parametrize("text, loss_fn", [(FLAT, _flat), (SHIFTED, _shifted)], ids=["flat", "shifted"])
def test_trace_gives_torchs_loss_and_every_gradient(lm, text, loss_fn):
    model, ids, y = lm
    expected, grads = _torch_reference(model, ids, y, loss_fn)
    ours = copy.deepcopy(model)
    result = gradcli.trace(ours, ids, loss=text, **_values(text, y))
    assert result.result["value"] == pytest.approx(expected, rel=1e-6)
    for name, p in ours.named_parameters():
        assert torch.allclose(p.grad, grads[name], rtol=1e-5, atol=1e-7), name
    names = [node.name for node in result.graph.nodes]
    assert names[0] == "NllLossBackward0" and "LogSoftmaxBackward0" in names


@pytest.mark.parametrize("text, loss_fn", [(FLAT, _flat), (SHIFTED, _shifted)], ids=["flat", "shifted"])
def test_grads_gives_torchs_loss_and_every_gradient_norm(lm, text, loss_fn):
    model, ids, y = lm
    expected, grads = _torch_reference(model, ids, y, loss_fn)
    result = gradcli.grads(model, ids, loss=text, **_values(text, y))
    assert result.loss == pytest.approx(expected, rel=1e-6)
    rows = {p.name: p for p in result.params}
    assert set(rows) == set(grads)
    for name, grad in grads.items():
        assert rows[name].grad_norm == pytest.approx(grad.norm().item(), rel=1e-5), name
    assert all(p.grad is None for p in model.parameters())  # grads leaves .grad as it was


# -- model outputs by name -----------------------------------------------------------------------


class ModelOutput(OrderedDict):
    """transformers' ModelOutput in miniature: a dataclass and an OrderedDict whose keys are the
    fields that are not None, each also an attribute."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                self[f.name] = value


@dataclasses.dataclass
class CausalLMOutput(ModelOutput):
    loss: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None
    hidden_states: Optional[tuple] = None


class Wrapped(nn.Module):
    """One small LM whose output is returned in the form `kind` says."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.embed = nn.Embedding(10, 6)
        self.head = nn.Linear(6, 10)

    def forward(self, ids, labels=None):
        hidden = self.embed(ids)
        logits = self.head(hidden)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        if self.kind == "tuple":
            return logits, hidden
        if self.kind == "dict":
            return {"logits": logits, "last_hidden_state": hidden}
        if self.kind == "dataclass":
            return Plain(logits, hidden)
        return CausalLMOutput(loss=loss, logits=logits, hidden_states=(hidden, hidden * 2))


@dataclasses.dataclass
class Plain:
    logits: torch.Tensor
    last_hidden_state: torch.Tensor


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(1)
    return torch.randint(0, 10, (2, 5)), torch.randint(0, 10, (2, 5))


@pytest.mark.parametrize(
    "kind, text",
    [
        ("tuple", "cross_entropy(out[0].flatten(0, 1), y.flatten()) + out[1].pow(2).mean()"),
        ("tuple", "cross_entropy(out.flatten(0, 1), y.flatten()) + out_1.pow(2).mean()"),
        ("dict", "cross_entropy(out.logits.flatten(0, 1), y.flatten()) + out['last_hidden_state'].pow(2).mean()"),
        ("dataclass", "cross_entropy(out.logits.flatten(0, 1), y.flatten()) + out.last_hidden_state.pow(2).mean()"),
        ("modeloutput", "cross_entropy(out.logits.flatten(0, 1), y.flatten()) + out.hidden_states[0].pow(2).mean()"),
    ],
)
def test_outputs_by_name_give_torchs_loss(small, kind, text):
    ids, y = small
    torch.manual_seed(2)
    model = Wrapped(kind)
    twin = copy.deepcopy(model)
    logits = twin.head(twin.embed(ids))
    expected = F.cross_entropy(logits.flatten(0, 1), y.flatten()) + twin.embed(ids).pow(2).mean()
    result = gradcli.trace(model, ids, loss=text, y=y)
    assert result.result["value"] == pytest.approx(expected.item(), rel=1e-6)


def test_out_loss_of_a_model_output(small):
    ids, y = small
    torch.manual_seed(2)
    model = Wrapped("modeloutput")
    result = gradcli.trace(model, ids, labels=y, loss="out.loss")
    twin = copy.deepcopy(model)
    expected = twin(ids, labels=y).loss
    assert result.result["value"] == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize(
    "kind, text, message, hint",
    [
        ("modeloutput", "out.logit.sum()", "the output has no field 'logit': it is a CausalLMOutput with logits, hidden_states",
         "logits, hidden_states"),
        ("modeloutput", "out.loss", "out.loss is None", "labels"),
        ("dict", "out['logit'].sum()", "the output has no key 'logit'", "logits, last_hidden_state"),
        ("dataclass", "out.hidden.sum()", "the output has no field 'hidden'", "logits, last_hidden_state"),
        ("tuple", "out[2].sum()", "index 2 is out of range: the output is a tuple of 2 items", None),
        ("modeloutput", "out.sum()", "'out' is a CausalLMOutput with logits, hidden_states, not a tensor", "out.logits"),
        ("modeloutput", "out.hidden_states.sum()", "is not a tensor", None),
    ],
)
def test_a_missing_output_name_lists_the_names_there_are(small, kind, text, message, hint):
    ids, _ = small
    with pytest.raises(GradcliError) as info:
        gradcli.trace(Wrapped(kind), ids, loss=text)
    rendered = info.value.render()
    assert message in rendered and "in --loss, column" in rendered, rendered
    if hint:
        assert hint in rendered


# -- your own loss ---------------------------------------------------------------------------------

LOSS_FILE = '''\
import torch.nn.functional as F


def shifted(out, ids):
    vocab = out.shape[-1]
    return F.cross_entropy(out[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))


def with_labels(out, **values):
    return F.cross_entropy(out.flatten(0, 1), values["y"].flatten())


def broken(out, ids):
    return out.reshape(7, 7).sum()
'''


@pytest.fixture()
def loss_file(tmp_path):
    path = tmp_path / "my_losses.py"
    path.write_text(LOSS_FILE)
    return path


def test_a_loss_file_gives_torchs_gradient_and_names_its_lines(lm, loss_file):
    model, ids, y = lm
    expected, grads = _torch_reference(model, ids, y, _shifted)
    ours = copy.deepcopy(model)
    result = gradcli.trace(ours, ids, loss=f"{loss_file}:shifted")
    assert result.result["value"] == pytest.approx(expected, rel=1e-6)
    for name, p in ours.named_parameters():
        assert torch.allclose(p.grad, grads[name], rtol=1e-5, atol=1e-7), name
    top = result.graph.nodes[0]
    assert top.name == "NllLossBackward0"
    assert top.origin.file.endswith("my_losses.py") and top.origin.line == 6
    assert "F.cross_entropy" in top.origin.code


def test_a_loss_taking_keywords_gets_every_value(lm, loss_file):
    model, ids, y = lm
    expected, _ = _torch_reference(model, ids, y, _flat)
    result = gradcli.grads(model, ids, loss=f"{loss_file}:with_labels", y=y)
    assert result.loss == pytest.approx(expected, rel=1e-6)


def test_an_error_in_the_loss_shows_its_own_frames(lm, loss_file):
    model, ids, _ = lm
    with pytest.raises(UserCodeError) as info:
        gradcli.trace(copy.deepcopy(model), ids, loss=f"{loss_file}:broken")
    text = info.value.render()
    assert "my_losses.py\", line 14, in broken" in text and "out.reshape(7, 7).sum()" in text
    assert "gradcli/" not in text


def test_a_python_callable_loss_in_trace_and_grads(lm):
    model, ids, y = lm
    expected, grads = _torch_reference(model, ids, y, _flat)

    def my_loss(out, y):
        return F.cross_entropy(out.flatten(0, 1), y.flatten())

    ours = copy.deepcopy(model)
    result = gradcli.trace(ours, ids, loss=my_loss, y=y)
    assert result.result["value"] == pytest.approx(expected, rel=1e-6)
    for name, p in ours.named_parameters():
        assert torch.allclose(p.grad, grads[name], rtol=1e-5, atol=1e-7), name
    assert gradcli.grads(model, ids, loss=my_loss, y=y).loss == pytest.approx(expected, rel=1e-6)


def test_a_callable_object_loss_without_forward(lm):
    """A loss object with __call__ but no forward (a functools.partial, a metric class): its
    signature is __call__'s, and it gets the values its parameters name."""
    import functools

    model, ids, y = lm
    expected, grads = _torch_reference(model, ids, y, _flat)

    class Loss:
        def __call__(self, out, y):
            return F.cross_entropy(out.flatten(0, 1), y.flatten())

    partial = functools.partial(lambda out, y, scale: scale * F.cross_entropy(out.flatten(0, 1), y.flatten()), scale=1.0)
    for loss in (Loss(), partial):
        ours = copy.deepcopy(model)
        result = gradcli.trace(ours, ids, loss=loss, y=y)
        assert result.result["value"] == pytest.approx(expected, rel=1e-6)
        for name, p in ours.named_parameters():
            assert torch.allclose(p.grad, grads[name], rtol=1e-5, atol=1e-7), name


def test_a_loss_of_any_arity_or_none_and_a_builtin_loss(lm):
    """*args takes the output (torch's value); no argument at all, or a builtin without a Python
    signature (torch.sum), is a usage error naming the loss, not a traceback."""
    model, ids, y = lm
    expected, _ = _torch_reference(model, ids, y, lambda logits, ids, y: logits.pow(2).mean())

    def star(*args):
        return args[0].pow(2).mean()

    def nothing():
        return torch.tensor(0.0)

    assert gradcli.grads(model, ids, loss=star).loss == pytest.approx(expected, rel=1e-6)
    with pytest.raises(GradcliError) as info:
        gradcli.grads(model, ids, loss=nothing)
    assert info.value.message == f"the loss {nothing.__qualname__} takes no argument: it is called as NAME(out, **vars)"
    with pytest.raises(GradcliError) as info:
        gradcli.grads(model, ids, loss=torch.sum)
    assert info.value.message.startswith("cannot read the signature of the loss ")


def test_a_loss_missing_a_value_and_one_taking_the_rest_by_keyword(lm):
    """A loss whose first parameter has an input's name (forward's `ids`) gets the output there,
    not the input twice; a parameter no value names is a usage error with a --var hint."""
    model, ids, y = lm
    expected, _ = _torch_reference(model, ids, y, _flat)

    def first_named_like_an_input(ids, **rest):
        return F.cross_entropy(ids.flatten(0, 1), rest["y"].flatten())

    assert gradcli.grads(model, ids, loss=first_named_like_an_input, y=y).loss == pytest.approx(expected, rel=1e-6)

    def needs_weights(out, y, weights):
        return out.sum()

    with pytest.raises(GradcliError) as info:
        gradcli.grads(model, ids, loss=needs_weights, y=y)
    assert info.value.message == f"the loss {needs_weights.__qualname__} needs 'weights'"
    assert info.value.hint == "give it with --var, e.g. --var 'weights=randint(0, 10, (8,))'"


def test_an_error_raised_in_a_loss_or_by_torch_in_a_loss_line_names_the_loss(lm):
    model, ids, y = lm

    def broken(out):
        raise ValueError("bad")

    with pytest.raises(UserCodeError) as info:
        gradcli.grads(model, ids, loss=broken)
    assert info.value.message.startswith(f"the loss {broken.__qualname__} raised ValueError: bad")
    with pytest.raises(IndexError):  # torch's own refusal, the truth that an error is due
        torch.zeros(2, 8, VOCAB).sum(dim=5)
    with pytest.raises(GradcliError) as info:
        gradcli.grads(model, ids, loss="out.sum(dim=5)")
    assert info.value.source == "out.sum(dim=5)" and info.value.what == "--loss"
    assert "in --loss" in info.value.render()


def test_loss_init_errors_name_the_loss_and_its_option(lm):
    """--loss-init's usage errors: its own option named (not forward's --init), a loss that is
    no nn.Module class, a class that is no loss; a constructor torch refuses is the user's
    error, as torch's own TypeError says."""
    model, ids, _ = lm
    with pytest.raises(TypeError, match="bogus"):  # torch: the truth that construction fails
        nn.CrossEntropyLoss(bogus=1)
    cases = [
        ("torch.nn:CrossEntropyLoss", ["nokey"], "--loss-init 'nokey' is not KEY=VALUE", None),
        ("torch.nn.functional:mse_loss", ["reduction='sum'"],
         "--loss-init applies to an nn.Module loss class; torch.nn.functional:mse_loss is a function",
         "drop --loss-init, or give the arguments through --var"),
        ("torch.nn:CrossEntropyLoss", ["bogus=1"],
         "constructing the loss torch.nn:CrossEntropyLoss as CrossEntropyLoss(bogus=1) raised TypeError: "
         "CrossEntropyLoss.__init__() got an unexpected keyword argument 'bogus'", None),
        ("collections:OrderedDict", [],
         "--loss collections:OrderedDict is the class OrderedDict: give a function NAME(out, **vars) or an "
         "nn.Module loss class", "e.g. --loss losses.py:shifted_loss or --loss torch.nn:CrossEntropyLoss"),
    ]
    for loss, init, message, hint in cases:
        with pytest.raises(GradcliError) as info:
            gradcli.grads(copy.deepcopy(model), ids, loss=loss, loss_init=init)
        assert info.value.message.splitlines()[0] == message
        if hint is not None:
            assert info.value.hint == hint


def test_a_loss_line_naming_nothing_lists_the_names_there_are(lm):
    """A name that is neither an output nor an input: the hint lists forward's inputs (read
    here from its signature) and `out`; an unknown function points into the --loss text."""
    import inspect

    model, ids, y = lm
    with pytest.raises(GradcliError) as info:
        gradcli.grads(model, ids, loss="out.sum() + q")
    assert info.value.message == "--loss uses 'q', which is neither an output nor an input"
    assert info.value.hint == "names here: " + ", ".join([*inspect.signature(model.forward).parameters, "out"])
    with pytest.raises(GradcliError) as info:
        gradcli.grads(model, ids, loss="nosuch(out)")
    assert info.value.source == "nosuch(out)" and info.value.what == "--loss"
    assert info.value.message == "unknown function 'nosuch'"


CLASSIFIER = '''\
import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))

    def forward(self, x):
        return self.net(x)
'''


def test_an_nn_module_loss_with_loss_init_on_the_command_line(cli, tmp_path):
    (tmp_path / "classifier.py").write_text(CLASSIFIER)
    args = [f"{tmp_path}/classifier.py:Classifier", "--var", "x=randn(6, 4)", "--var", "target=[0, 2, 0, 1, 0, 2]",
            "--loss", "torch.nn:CrossEntropyLoss", "--loss-init", "ignore_index=0", "--seed", "3"]
    traced = cli("trace", *args, "--json")
    assert traced.exit_code == 0, traced.stderr
    judged = cli("grads", *args, "--json")
    assert judged.exit_code == 0, judged.stderr
    import json

    value = json.loads(traced.stdout)["result"]["value"]
    # The same model, inputs and seed in torch: only the three rows whose target is not 0 count.
    # By path and under a name of its own: another test may have cached a module 'classifier'.
    import importlib.util

    spec = importlib.util.spec_from_file_location("_loss_line_classifier", tmp_path / "classifier.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    Classifier = module.Classifier

    with torch.random.fork_rng():
        torch.manual_seed(3)
        model = Classifier()
    document = json.loads(traced.stdout)
    x = torch.tensor(next(leaf for leaf in document["leaves"] if leaf["name"] == "x")["value"])
    target = torch.tensor([0, 2, 0, 1, 0, 2])
    expected = nn.CrossEntropyLoss(ignore_index=0)(model(x), target)
    assert value == pytest.approx(expected.item(), rel=1e-6)
    assert json.loads(judged.stdout)["loss"] == pytest.approx(expected.item(), rel=1e-6)


def test_an_nn_module_loss_in_the_python_api(lm):
    model, ids, y = lm
    logits_loss = nn.CrossEntropyLoss(ignore_index=0)
    expected = logits_loss(copy.deepcopy(model)(ids).flatten(0, 1), y.flatten())

    def flat(out, y):
        return logits_loss(out.flatten(0, 1), y.flatten())

    assert gradcli.grads(model, ids, loss=flat, y=y).loss == pytest.approx(expected.item(), rel=1e-6)
    result = gradcli.grads(torch.nn.Linear(4, 3), torch.randn(5, 4), loss="torch.nn:CrossEntropyLoss",
                           loss_init=["ignore_index=0"], target=torch.tensor([0, 1, 2, 1, 0]))
    assert result.ok


@pytest.mark.parametrize(
    "args, message",
    [
        (["--loss", "torch.nn:NoSuchLoss"], "torch.nn has no 'NoSuchLoss'"),
        (["--loss", "torch.nn:CrossEntropyLoss", "--loss-init", "ignore=0"], "constructing the loss"),
        (["--loss", "torch.nn:CrossEntropyLoss"], "the loss torch.nn:CrossEntropyLoss needs 'target'"),
        (["--loss", "out.sum()", "--loss-init", "ignore_index=0"], "--loss-init constructs a loss class"),
        (["--loss", "cross_entropy(out[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1)"], "in --loss, column"),
        (["--loss", "out.logits.sum()"], "a Tensor has no field 'logits'"),
        (["--loss", "cross_entropy(out, ids)"], "hint: scores [batch, time, classes] are rows first"),
        (["--loss", "cross_entropy(out.flatten(0, 1), ids.flatten(), reduction='avg')"],
         "'reduction' is one of 'none', 'mean', 'sum', not 'avg'"),
    ],
)
def test_bad_losses_are_one_clear_error(cli, args, message):
    result = cli("trace", "examples/lm/tiny_lm.py:TinyLM", "--var", "ids=randint(0, 50, (2, 8))", *args)
    assert result.exit_code == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
