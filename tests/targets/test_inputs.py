"""Input binding (gradcli/targets/inputs.py): `--var` texts become the call's arguments.

Each case runs a small real model on the bound arguments and on arguments made here by hand
with torch, as the module docstring says they should be: a number for a numeric default, a
long tensor of token ids for a parameter annotated torch.LongTensor, a tensor of the model's
dtype otherwise, and random values drawn from the seed's own generator.
"""

from __future__ import annotations

import inspect
from typing import Optional

import pytest
import torch
from torch import nn

from gradcli.errors import VariableError
from gradcli.targets.inputs import bind_inputs


class Scaled(nn.Module):
    """A numeric default that the forward uses as a Python number (`range` needs an int)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x, repeat: int = 1, scale: float = 2.0, flag: bool = False):
        out = torch.cat([self.fc(x) for _ in range(repeat)], dim=0) * scale
        return -out if flag else out


class Tokens(nn.Module):
    """Token ids annotated as transformers annotate input_ids."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(6, 3)

    def forward(self, input_ids: Optional[torch.LongTensor] = None, weights=None):
        out = self.embed(input_ids)
        return out if weights is None else out * weights


def bind(model: nn.Module, *variables: str, seed: int = 0, dtype: str = "float32", loss_names=()):
    return bind_inputs(model.forward, "model", list(variables), [], {}, dtype=dtype, device="cpu", seed=seed,
                       data_inputs=True, loss_names=loss_names)


def call(model: nn.Module, bound) -> torch.Tensor:
    return model(*bound.args, **bound.kwargs)


def test_a_number_for_a_numeric_default_is_passed_as_that_number():
    torch.manual_seed(0)
    model, x = Scaled(), [[1.0, 2.0]]
    bound = bind(model, f"x={x}", "scale=0.5")
    truth = model(torch.tensor(x), 1, 0.5)  # torch, called by hand
    assert torch.equal(call(model, bound), truth)
    scale = bound.kwargs.get("scale", bound.args[2] if len(bound.args) > 2 else None)
    assert type(scale) is float and scale == 0.5


def test_an_integer_for_an_int_parameter_is_an_int_as_python_passes_it():
    """`repeat=3` for `repeat: int = 1` is the int 3 (range(3.0) raises), `scale=3` for
    `scale: float = 2.0` the float 3.0, and `repeat=2` for an annotated `repeat: int` without
    a default an int too."""
    torch.manual_seed(0)
    model, x = Scaled(), [[1.0, 2.0]]
    bound = bind(model, f"x={x}", "repeat=3", "scale=3")
    assert type(bound.kwargs.get("repeat", bound.args[1] if len(bound.args) > 1 else None)) is int
    assert type(bound.kwargs.get("scale", bound.args[2] if len(bound.args) > 2 else None)) is float
    truth = model(torch.tensor(x), repeat=3, scale=3.0)  # torch, called by hand
    assert truth.shape == (3, 2) and torch.equal(call(model, bound), truth)

    def tiled(x, repeat: int):
        return x.repeat(repeat)

    bound = bind_inputs(tiled, "tiled", ["x=[1.0, 2.0]", "repeat=2"], [], {}, dtype="float64", device="cpu",
                        seed=0, data_inputs=False)
    assert bound.args[1] == 2 and type(bound.args[1]) is int
    assert torch.equal(tiled(*bound.args), torch.tensor([1.0, 2.0, 1.0, 2.0], dtype=torch.float64))


REPEAT = """
from torch import nn


class Repeat(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x, repeat: int = 1):
        return sum(self.fc(x).pow(2).sum() * (k + 1) for k in range(repeat))
"""


def _repeat_model(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("_inputs_repeat", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Repeat


def _by_hand(model, x, repeat):
    """The loss and each parameter's gradient norm of the module called by hand."""
    model.zero_grad(set_to_none=True)
    loss = model(torch.tensor(x), repeat=repeat)
    loss.backward()
    return loss.item(), {name: p.grad.norm().item() for name, p in model.named_parameters()}


def test_an_int_parameter_through_the_cli_and_the_python_api(cli, tmp_path):
    import json

    import gradcli

    (tmp_path / "repeat.py").write_text(REPEAT)
    Repeat = _repeat_model(tmp_path / "repeat.py")
    x = [[1.0, 2.0]]
    judged = cli("grads", f"{tmp_path}/repeat.py:Repeat", "--var", f"x={x}", "--var", "repeat=3", "--seed", "3", "--json")
    assert judged.exit_code == 0, judged.stderr
    document = json.loads(judged.stdout)
    with torch.random.fork_rng():
        torch.manual_seed(3)
        model = Repeat()
    loss, norms = _by_hand(model, x, 3)
    assert loss != pytest.approx(_by_hand(model, x, 1)[0])  # repeat matters
    assert document["loss"] == pytest.approx(loss, rel=1e-6)
    assert {p["name"]: p["grad_norm"] for p in document["parameters"]} == pytest.approx(norms, rel=1e-6)

    result = gradcli.grads(model, torch.tensor(x), repeat=3)
    assert result.loss == pytest.approx(loss, rel=1e-6)


def test_a_number_for_a_parameter_without_a_numeric_default_is_a_tensor():
    model = Tokens()
    bound = bind(model, "input_ids=[[1, 2]]", "weights=2")
    assert isinstance(bound.kwargs.get("weights", bound.args[-1]), torch.Tensor)
    truth = model.embed(torch.tensor([[1, 2]])) * torch.tensor(2.0)
    assert torch.equal(call(model, bound), truth)


def test_a_bool_default_is_not_numeric():
    """bool is an int in Python, yet a bool default is no numeric one: `flag=1` becomes a
    tensor like any other value, and a 0-d tensor of 1 is true, so the model negates."""
    torch.manual_seed(0)
    model, x = Scaled(), [[1.0, 2.0]]
    bound = bind(model, f"x={x}", "flag=1")
    flag = bound.kwargs.get("flag", bound.args[-1])
    assert isinstance(flag, torch.Tensor) and flag.dtype == torch.float32
    assert torch.equal(call(model, bound), -model(torch.tensor(x)))


def test_token_ids_for_a_long_tensor_annotation_are_long_and_their_gradient_is_torchs():
    model = Tokens()
    bound = bind(model, "input_ids=[[1, 2], [2, 5]]")
    ids = bound.kwargs.get("input_ids", bound.args[0] if bound.args else None)
    assert ids.dtype == torch.long and ids.tolist() == [[1, 2], [2, 5]] and not ids.requires_grad
    call(model, bound).pow(2).sum().backward()
    mine = model.embed.weight.grad.clone()
    model.zero_grad()
    model(torch.tensor([[1, 2], [2, 5]])).pow(2).sum().backward()  # torch, by hand
    assert torch.equal(mine, model.embed.weight.grad)
    assert [i for i in range(6) if bool(mine[i].abs().sum() > 0)] == [1, 2, 5]


def test_integers_for_a_plain_parameter_are_a_float_tensor_of_the_models_dtype():
    torch.manual_seed(0)
    model = Scaled().double()
    bound = bind(model, "x=[[1, 2]]", dtype="float64")
    (x,) = bound.args
    assert x.dtype == torch.float64 and x.tolist() == [[1.0, 2.0]]
    assert torch.equal(call(model, bound), model(torch.tensor([[1.0, 2.0]], dtype=torch.float64)))


def test_random_values_come_from_the_seeds_own_generator():
    torch.manual_seed(0)
    model = Scaled()
    bound = bind(model, "x=randn(4, 2)", seed=7)
    torch.manual_seed(123)  # the global generator's state does not matter
    again = bind(model, "x=randn(4, 2)", seed=7)
    truth = torch.randn(4, 2, generator=torch.Generator().manual_seed(7))
    assert torch.equal(bound.args[0], truth) and torch.equal(again.args[0], truth)


def test_integer_labels_for_the_loss_are_class_indices():
    torch.manual_seed(0)
    model = Scaled()
    bound = bind(model, "x=[[1.0, 2.0], [0.5, 1.0]]", "target=[1, 0]", loss_names=("target",))
    target = bound.tensors["target"]
    assert target.dtype == torch.long and target.tolist() == [1, 0]
    out = call(model, bound)
    truth = nn.functional.cross_entropy(out, torch.tensor([1, 0]))  # torch takes them as indices
    assert torch.equal(nn.functional.cross_entropy(out, target), truth)


def test_the_signature_is_read_from_forward():
    assert list(inspect.signature(Scaled().forward).parameters) == ["x", "repeat", "scale", "flag"]
    with pytest.raises(Exception, match="needs the input 'x'"):
        bind(Scaled())


def test_an_input_given_twice_is_refused():
    model = Scaled()
    with pytest.raises(VariableError, match="the input 'x' is given twice"):
        bind(model, "x=[[1.0, 2.0]]", "x=[[3.0, 4.0]]")
    with pytest.raises(VariableError, match="the input 'x' is given twice"):
        bind_inputs(model.forward, "model", ["x=[[1.0, 2.0]]"], [torch.ones(1, 2)], {}, dtype="float32",
                    device="cpu", seed=0, data_inputs=True)


def test_inputs_are_positional_until_a_default_is_skipped_as_a_call_is_written():
    """torch's forward pre-hook (without kwargs) sees the positional arguments only: the data
    input stays positional, and `scale` after the skipped `repeat` goes by keyword."""
    torch.manual_seed(0)
    model, x = Scaled(), [[1.0, 2.0]]
    bound = bind(model, f"x={x}", "scale=0.5")
    seen = []
    handle = model.register_forward_pre_hook(lambda module, args: seen.append(args))
    try:
        out = call(model, bound)
    finally:
        handle.remove()
    assert len(seen) == 1 and len(seen[0]) == 1 and torch.equal(seen[0][0], torch.tensor(x))
    assert torch.equal(out, model(torch.tensor(x), scale=0.5))  # torch, called by hand


def test_a_positional_only_default_keeps_its_place():
    """`n` skipped keeps its default in place, so `m` after it (positional-only, which a
    keyword cannot give) still reaches forward."""

    def power(x, n=2, m=3, /):
        return x ** n * m

    bound = bind_inputs(power, "power", ["x=[1.5, 2.0]", "m=5"], [], {}, dtype="float64", device="cpu",
                        seed=0, data_inputs=False)
    x = torch.tensor([1.5, 2.0], dtype=torch.float64)
    assert torch.equal(power(*bound.args, **bound.kwargs), power(x, 2, 5))


def test_values_for_the_loss_only_are_tensors_apart_from_forwards_arguments():
    """A --var that forward does not take but --loss reads (labels, targets) is made as a
    tensor of its own: integers written are class indices (int64, as torch.tensor makes them),
    floats the model's dtype; neither requires grad unless --wrt names it. A Python value for
    the loss is passed as it is."""
    torch.manual_seed(0)
    model, x = Scaled().double(), [[1.0, 2.0], [0.5, 1.0]]
    bound = bind_inputs(model.forward, "model", [f"x={x}", "target=[[0.5, 1.0], [1.5, 2.0]]", "labels=[1, 0]"], [],
                        {}, dtype="float64", device="cpu", seed=0, data_inputs=True, loss_names=("target", "labels"))
    target, labels = bound.tensors["target"], bound.tensors["labels"]
    assert target.dtype == torch.float64 and not target.requires_grad and labels.dtype == torch.long
    assert "target" not in bound.kwargs and len(bound.args) == 1
    out = call(model, bound)
    truth = nn.functional.mse_loss(out, torch.tensor([[0.5, 1.0], [1.5, 2.0]], dtype=torch.float64))
    assert torch.equal(nn.functional.mse_loss(out, target), truth)
    assert bound.specs["target"] == "[[0.5, 1.0], [1.5, 2.0]]"

    wanted = bind_inputs(model.forward, "model", [f"x={x}", "target=[[0.5, 1.0], [1.5, 2.0]]"], [], {},
                         dtype="float64", device="cpu", seed=0, data_inputs=True, loss_names=("target",),
                         wrt=("target",))
    assert wanted.tensors["target"].requires_grad and wanted.tensors["target"].is_leaf

    given = torch.tensor([1, 0])
    from_python = bind_inputs(model.forward, "model", [f"x={x}"], [], {"labels": given}, dtype="float64",
                              device="cpu", seed=0, data_inputs=True, loss_names=("labels",))
    assert from_python.tensors["labels"] is given and from_python.specs["labels"] == "given from Python"
    assert "labels" not in from_python.kwargs


def test_a_value_forward_takes_goes_to_forward_even_when_the_loss_reads_it_too():
    torch.manual_seed(0)
    model, x = Scaled(), torch.tensor([[1.0, 2.0]])
    bound = bind_inputs(model.forward, "model", [], [], {"x": x}, dtype="float32", device="cpu", seed=0,
                        data_inputs=True, loss_names=("x",))
    assert torch.equal(call(model, bound), model(x))  # torch, called by hand


def test_without_a_seed_one_is_drawn_and_recorded_so_the_values_repeat():
    model = Scaled()
    bound = bind(model, "x=randn(3, 2)", seed=None)
    assert type(bound.seed) is int and 0 <= bound.seed < 2**31 - 1
    truth = torch.randn(3, 2, generator=torch.Generator().manual_seed(bound.seed))
    assert torch.equal(bound.args[0], truth)


def test_an_unknown_input_shows_the_signature():
    model = Scaled()
    with pytest.raises(VariableError) as raised:
        bind(model, "x=[[1.0, 2.0]]", "y=1")
    assert raised.value.hint == f"its signature: {inspect.signature(model.forward)}"


class Embedded(nn.Module):
    """Token ids without an annotation: only running forward tells they must stay integers."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(6, 3)

    def forward(self, ids):
        return self.embed(ids)


def test_integers_written_stay_int64_unless_forward_refuses_them():
    """As torch.tensor reads `[[1, 2]]` (int64): an Embedding takes them as they are; a Linear
    refuses int64, and then they are made the model's dtype (and said so)."""
    ids = [[1, 2]]
    model = Embedded()
    bound = bind_inputs(model.forward, "model", [f"ids={ids}"], [], {}, dtype="float32", device="cpu", seed=0,
                        data_inputs=True, probe=model)
    assert bound.args[0].dtype == torch.long and bound.floated == []
    assert torch.equal(call(model, bound), model(torch.tensor(ids)))  # torch, called by hand

    torch.manual_seed(0)
    linear = Scaled()
    with pytest.raises(RuntimeError):
        linear(torch.tensor(ids))  # torch refuses int64 for a float Linear
    bound = bind_inputs(linear.forward, "model", [f"x={ids}"], [], {}, dtype="float32", device="cpu", seed=0,
                        data_inputs=True, probe=linear)
    assert bound.floated == ["x"] and bound.args[0].dtype == torch.float32
    assert torch.equal(call(linear, bound), linear(torch.tensor(ids, dtype=torch.float32)))


def test_a_functions_missing_input_names_the_function_and_a_python_value_says_so():
    from gradcli.errors import UsageError

    def tiled(x, repeat: int):
        return x.repeat(repeat)

    with pytest.raises(UsageError) as raised:
        bind_inputs(tiled, "tiled", ["repeat=2"], [], {}, dtype="float64", device="cpu", seed=0, data_inputs=False)
    assert str(raised.value).splitlines()[0] == f"error: tiled needs the input 'x': tiled{inspect.signature(tiled)}"
    x = torch.ones(1, 2)
    bound = bind_inputs(Scaled().forward, "model", [], [x], {}, dtype="float32", device="cpu", seed=0,
                        data_inputs=True)
    assert bound.tensors["x"] is x and bound.specs == {"x": "given from Python"}


class KeywordOnly(nn.Module):
    """An input forward takes by keyword only: it is bound, and probed, by keyword."""

    def __init__(self, embedded: bool):
        super().__init__()
        torch.manual_seed(0)
        self.embedded = embedded
        self.embed, self.fc = nn.Embedding(6, 3), nn.Linear(2, 3)

    def forward(self, *, ids, scale):
        return (self.embed(ids) if self.embedded else self.fc(ids)) * scale


def test_written_integers_probed_with_keyword_inputs_stay_int64_where_forward_takes_them():
    """The probe calls forward as the bound call does, keywords and all: an Embedding given ids
    by keyword takes the int64 ids (torch, called by hand), so they are not made floats."""
    model, ids = KeywordOnly(embedded=True), [[1, 2]]
    bound = bind_inputs(model.forward, "model", [f"ids={ids}", "scale=[2.0]"], [], {}, dtype="float32",
                        device="cpu", seed=0, data_inputs=True, probe=model)
    assert bound.floated == [] and bound.kwargs["ids"].dtype == torch.long
    assert torch.equal(call(model, bound), model(ids=torch.tensor(ids), scale=torch.tensor([2.0])))


@pytest.mark.parametrize("wrt", [(), ("ids",)])
def test_written_integers_a_linear_refuses_by_keyword_become_floats_that_require_grad_only_for_wrt(wrt):
    model, ids = KeywordOnly(embedded=False), [[1, 2]]
    with pytest.raises(RuntimeError):
        model(ids=torch.tensor(ids), scale=2.0)  # torch refuses int64 for a float Linear
    bound = bind_inputs(model.forward, "model", [f"ids={ids}", "scale=[2.0]"], [], {}, dtype="float32",
                        device="cpu", seed=0, data_inputs=True, probe=model, wrt=wrt)
    floated = bound.kwargs["ids"]
    assert bound.floated == ["ids"] and bound.tensors["ids"] is floated
    assert floated.dtype == torch.float32 and floated.requires_grad is bool(wrt) and floated.is_leaf
    truth = model(ids=torch.tensor(ids, dtype=torch.float32), scale=torch.tensor([2.0]))  # torch, by hand
    assert torch.equal(call(model, bound), truth)


def test_written_integers_bound_to_the_sole_input_by_another_name_become_floats_when_refused():
    """`--var x=[[1, 2, 3]]` for nn.Sequential's `input`: the written integers are looked up
    under the user's name, made floats when the Linear refuses int64, and said so."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(3, 2)), [[1, 2, 3]]
    bound = bind_inputs(model.forward, "model", [f"x={x}"], [], {}, dtype="float32", device="cpu", seed=0,
                        data_inputs=True, probe=model)
    assert bound.renamed == {"x": "input"} and bound.floated == ["x"]
    assert bound.tensors["x"] is bound.args[0] and bound.args[0].dtype == torch.float32
    assert torch.equal(call(model, bound), model(torch.tensor(x, dtype=torch.float32)))  # torch, by hand
    # docs/cli.md and docs/json.md: the header's `found` goes on with "; --var x → input".
    assert bound.described("nn.Module Sequential") == (
        "nn.Module Sequential; --var x → input; "
        "--var x: the integers written are read as floats (forward refused them as int64)")


def test_an_integer_tensor_given_from_python_is_never_floated():
    """Only integers written in a --var are read either way; a tensor from Python is the
    caller's own, even where forward refuses it (torch says so when it runs)."""
    torch.manual_seed(0)
    model, given = Scaled(), torch.tensor([[1, 2]])
    with pytest.raises(RuntimeError):
        model(given)  # torch refuses int64 for a float Linear
    bound = bind_inputs(model.forward, "model", [], [given], {}, dtype="float32", device="cpu", seed=0,
                        data_inputs=True, probe=model)
    assert bound.floated == [] and bound.args[0] is given and bound.tensors["x"] is given


def test_an_integer_number_written_for_an_unannotated_input_is_an_int64_scalar():
    """`--var ids=3`, one number, reads as torch.tensor(3) does: an int64 index an Embedding
    takes (torch, called by hand)."""
    model = Embedded()
    bound = bind_inputs(model.forward, "model", ["ids=3"], [], {}, dtype="float32", device="cpu", seed=0,
                        data_inputs=True, probe=model)
    (ids,) = bound.args
    assert ids.dtype == torch.tensor(3).dtype and ids.shape == () and bound.floated == []
    assert torch.equal(call(model, bound), model(torch.tensor(3)))


class Annotated(nn.Module):
    """A parameter annotated Tensor whose default is a number: the default says a number."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(2, 2)

    def forward(self, x, scale: torch.Tensor = 2.0):
        return self.fc(x) * scale


def test_a_number_for_a_numeric_default_is_a_number_whatever_the_annotation():
    """The module docstring's rule: a parameter with a numeric default given a number is passed
    as that Python number, as `model(x, scale=3.0)` passes it; it is no tensor input (leaf)."""
    model, x = Annotated(), [[1.0, 2.0]]
    bound = bind(model, f"x={x}", "scale=3")
    scale = bound.args[1] if len(bound.args) > 1 else bound.kwargs["scale"]
    assert type(scale) is float and scale == 3.0 and set(bound.tensors) == {"x"}
    assert torch.equal(call(model, bound), model(torch.tensor(x), scale=3.0))  # torch, by hand


def test_var_specs_already_read_from_a_dict_are_bound_as_their_texts_are():
    """The API's `{"x": [[1.0, 2.0]], "scale": 0.5}` arrives read (VarSpecs): bound as the
    texts `x=[[1.0, 2.0]]` and `scale=0.5` are, the model called by hand as the truth."""
    from gradcli.interpret.var_spec import read_vars

    torch.manual_seed(0)
    model, x = Scaled(), [[1.0, 2.0]]
    bound = bind_inputs(model.forward, "model", list(read_vars({"x": x, "scale": 0.5}).values()), [], {},
                        dtype="float32", device="cpu", seed=0, data_inputs=True)
    assert torch.equal(call(model, bound), model(torch.tensor(x), scale=0.5))


def test_a_function_s_single_input_takes_no_var_of_another_name():
    """Only a model's one input (its name an accident of torch's code) takes a --var named
    otherwise; a function's parameter names are the user's own, so `--var x` for `f(input)`
    is refused with its signature, as Python refuses f(x=...)."""
    def f(input):
        return input.sum()

    with pytest.raises(TypeError):
        f(x=torch.ones(2))  # Python: f has no parameter x
    with pytest.raises(VariableError) as raised:
        bind_inputs(f, "f", ["x=[1.0, 2.0]"], [], {}, dtype="float64", device="cpu", seed=0, data_inputs=False)
    assert raised.value.message == "--var x: f has no input 'x', and --loss does not use it"
    assert raised.value.hint == f"its signature: {inspect.signature(f)}"


def test_values_that_do_not_fit_the_signature_say_so_in_python_s_words():
    from gradcli.errors import UsageError

    model, values = Scaled(), [torch.ones(1, 2)] * 5
    with pytest.raises(TypeError) as python:
        inspect.signature(model.forward).bind_partial(*values)  # Python's own refusal
    with pytest.raises(UsageError) as raised:
        bind_inputs(model.forward, "model", [], values, {}, dtype="float32", device="cpu", seed=0, data_inputs=True)
    assert raised.value.message == f"the inputs do not fit model{inspect.signature(model.forward)}: {python.value}"


def test_a_callable_without_a_python_signature_is_refused_by_name():
    from gradcli.errors import UsageError

    with pytest.raises(ValueError):
        inspect.signature(torch.sum)  # a builtin: Python reads no signature
    with pytest.raises(UsageError) as raised:
        bind_inputs(torch.sum, "torch.sum", ["x=[1.0]"], [], {}, dtype="float32", device="cpu", seed=0,
                    data_inputs=False)
    assert raised.value.message == "cannot read the signature of torch.sum"
    assert raised.value.hint == "give it a Python signature (def forward(self, x): ...)"


def _relu_forward(self, x, y):
    return torch.relu(self.fc(x)) + y


class AssignedForward(nn.Module):
    """forward assigned from a function of another name: torch still calls it as forward."""

    forward = _relu_forward

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)


def test_a_model_s_missing_input_names_forward_and_hints_a_var():
    from gradcli.errors import UsageError

    model = AssignedForward()
    with pytest.raises(UsageError) as raised:
        bind_inputs(model.forward, "net.py:Net", ["x=[[1.0, 2.0]]"], [], {}, dtype="float32", device="cpu", seed=0,
                    data_inputs=True)
    assert raised.value.message == f"net.py:Net needs the input 'y': forward{inspect.signature(model.forward)}"
    assert raised.value.hint == "give it with --var, e.g. --var 'y=randn(2, 3)' (the shape net.py:Net expects)"


def test_a_nameless_callable_s_missing_input_is_said_with_its_signature():
    """A callable object has no __name__ (Python's getattr says so): the call is written fn(...)."""
    from gradcli.errors import UsageError

    class Scale:
        def __call__(self, x, factor):
            return x * factor

    fn = Scale()
    assert not hasattr(fn, "__name__")
    with pytest.raises(UsageError) as raised:
        bind_inputs(fn, "scale.py:fn", ["x=[1.0]"], [], {}, dtype="float64", device="cpu", seed=0, data_inputs=False)
    assert raised.value.message == f"scale.py:fn needs the input 'factor': fn{inspect.signature(fn)}"


def test_each_input_records_the_text_it_was_given_by():
    """What the header says each input was: the --var's text after `=`, under the user's name."""
    model = nn.Sequential(nn.Linear(2, 2))
    bound = bind_inputs(model.forward, "model", ["x=[[1.0, 2.0]]"], [], {}, dtype="float32", device="cpu", seed=0,
                        data_inputs=True)
    assert bound.specs == {"x": "[[1.0, 2.0]]"}
    bound = bind(Scaled(), "x=randn(3, 2)", "scale=0.5")
    assert bound.specs == {"x": "randn(3, 2)", "scale": "0.5"}


def test_values_for_the_loss_only_are_drawn_from_the_seed_s_generator_and_integers_stay_indices():
    """`target=randn(2, 2)` for the loss alone is the seed's generator's first draw (x is written
    out, so it draws nothing), whatever torch's global state; `label=1`, one integer, is an
    int64 index as torch.tensor(1) is."""
    model = Scaled()
    torch.manual_seed(123)
    bound = bind_inputs(model.forward, "model", ["x=[[1.0, 2.0]]", "target=randn(2, 2)", "label=1"], [], {},
                        dtype="float32", device="cpu", seed=7, data_inputs=True, loss_names=("target", "label"))
    assert torch.equal(bound.tensors["target"], torch.randn(2, 2, generator=torch.Generator().manual_seed(7)))
    label = bound.tensors["label"]
    assert label.dtype == torch.tensor(1).dtype and label.shape == () and int(label) == 1


def test_a_python_value_for_the_loss_named_by_wrt_is_a_leaf_with_torch_s_gradient():
    """`--wrt target` for a target given from Python: a leaf that requires grad (the caller's
    tensor left as it was), its gradient torch's own on the same values."""
    torch.manual_seed(0)
    model, x, given = Scaled(), torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, -0.5]])
    bound = bind_inputs(model.forward, "model", [], [x], {"target": given}, dtype="float32", device="cpu", seed=0,
                        data_inputs=True, loss_names=("target",), wrt=("target",))
    target = bound.tensors["target"]
    assert target.requires_grad and target.is_leaf and not given.requires_grad
    (got,) = torch.autograd.grad(nn.functional.mse_loss(call(model, bound), target), target)
    leaf = given.clone().requires_grad_(True)
    (truth,) = torch.autograd.grad(nn.functional.mse_loss(model(x), leaf), leaf)  # torch, by hand
    assert torch.equal(got, truth)
