"""The loss's refusals and hints (targets/loss.py), word for word, and the cases that decide
which signature a user's loss is read by and which library an expression may call.

The truth is Python's and torch's: the loss called by hand, `type(value).__name__` of what it
returned, a model output's own keys and fields (`dict.keys`, `dataclasses.fields`), the
forward's signature (`inspect.signature`), and torch computing the same loss.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
import torch.nn.functional as F

from gradcli.errors import UsageError
from gradcli.targets.loss import Loss, as_loss
from gradcli.targets.outputs import name_outputs

OUT = torch.tensor([[0.5, -1.0], [2.0, 0.25]])
Y = torch.tensor([[1.0, 0.0], [0.0, 1.0]])


def test_a_loss_that_returns_no_tensor_says_what_it_returned():
    def as_number(out):
        return out.pow(2).mean().item()

    with pytest.raises(UsageError) as info:
        Loss(as_number).apply(OUT, {"out": OUT}, {})
    returned = type(as_number(OUT)).__name__  # Python's own name for what it returns: float
    assert info.value.message == f"the loss {as_number.__qualname__} returned a {returned}, not a tensor"
    assert info.value.hint == "return the loss tensor (a scalar) that backward starts from"


def test_a_plain_function_is_read_by_its_own_signature_even_with_a_forward_attribute():
    """A function is called itself (`fn(out, **values)`), so its own parameters are the ones
    bound, never those of a `forward` attribute hung on it (an nn.Module's would be)."""

    def mse(out, y):
        return F.mse_loss(out, y)

    mse.forward = lambda out, weights: out.sum()  # not what gets called
    loss = Loss(mse)
    assert loss.names() == list(inspect.signature(mse).parameters)[1:]
    value, _ = loss.apply(OUT, {"out": OUT}, {"y": Y, "ids": torch.tensor([1, 0])})
    assert torch.equal(value, F.mse_loss(OUT, Y))  # torch, by hand


def test_a_loss_expression_calls_a_function_of_the_library_folders(tmp_path):
    (tmp_path / "mine.toml").write_text(
        '[squared]\nsignature = "squared(x)"\nbody = "x * x"\ndoc = "x times itself."\nsource = "this test"\n',
        encoding="utf-8")
    loss = as_loss("squared(out).sum()", library_dirs=[tmp_path])
    assert loss.names() == ["out"]
    value, _ = loss.apply(OUT, {"out": OUT}, {})
    assert torch.equal(value, (OUT * OUT).sum())  # torch, by hand


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: torch.Tensor


def _unknown_name_hint(output, inputs):
    with pytest.raises(UsageError) as info:
        Loss("out.logits.sum() + q").apply(output, name_outputs(output, "model"), inputs)
    assert info.value.message == "--loss uses 'q', which is neither an output nor an input"
    return info.value.hint


def test_a_name_unknown_to_a_dict_output_lists_the_inputs_the_keys_and_out_then_its_fields():
    output = {"logits": OUT, "hidden": OUT * 2}
    inputs = {"ids": torch.tensor([1, 0])}
    names = [*inputs, *output.keys(), "out"]  # a dict's tensors are its keys; `out` is the whole
    fields = ", ".join(f"out.{key}" for key in output.keys())
    assert _unknown_name_hint(output, inputs) == f"names here: {', '.join(names)}; the output's fields: {fields}"


def test_a_name_unknown_to_a_dataclass_output_lists_its_fields():
    output = Output(OUT, OUT * 2)
    inputs = {"ids": torch.tensor([1, 0])}
    keys = [f.name for f in dataclasses.fields(output)]
    fields = ", ".join(f"out.{key}" for key in keys)
    assert _unknown_name_hint(output, inputs) == f"names here: {', '.join([*inputs, *keys, 'out'])}; the output's fields: {fields}"


def test_a_name_unknown_to_a_tuple_output_lists_out_once_and_no_fields():
    """A tuple's first item is `out` already (then `out_1`...): `out` is listed once, and a
    tuple has no fields to list."""
    output = (OUT, OUT * 2, OUT * 3)
    inputs = {"ids": torch.tensor([1, 0])}
    with pytest.raises(UsageError) as info:
        Loss("out.sum() + q").apply(output, name_outputs(output, "model"), inputs)
    names = [*inputs, "out", *(f"out_{i}" for i in range(1, len(output)))]
    assert info.value.hint == f"names here: {', '.join(names)}"


@pytest.mark.parametrize("init, key", [(["--init=0"], "--init=0"), (["ignore_index"], "ignore_index")])
def test_a_loss_init_that_is_not_key_value_quotes_the_user_s_text_as_written(init, key):
    with pytest.raises(UsageError) as info:
        as_loss("torch.nn:CrossEntropyLoss", init)
    assert info.value.message == f"--loss-init '{key}' is not KEY=VALUE"


def test_loss_init_without_a_loss_is_refused_with_an_example_torch_takes():
    with pytest.raises(UsageError) as info:
        as_loss(None, ["ignore_index=0"])
    assert info.value.message == "--loss-init constructs a loss class named by --loss"
    assert info.value.hint == "e.g. --loss torch.nn:CrossEntropyLoss --loss-init ignore_index=0"
    torch.nn.CrossEntropyLoss(ignore_index=0)  # the example is one torch constructs


def test_the_names_a_loss_reads_refuse_a_loss_without_arguments_or_signature_by_its_name():
    def nothing():
        return torch.tensor(0.0)

    with pytest.raises(UsageError) as info:
        Loss(nothing).names()
    assert info.value.message == f"the loss {nothing.__qualname__} takes no argument: it is called as NAME(out, **vars)"
    with pytest.raises(ValueError):
        inspect.signature(torch.sum)  # a builtin: Python reads no signature
    with pytest.raises(UsageError) as info:
        Loss(torch.sum).names()
    assert info.value.message == f"cannot read the signature of the loss {torch.sum.__qualname__}"


def test_loss_init_with_an_expression_or_a_loss_that_is_neither_text_nor_callable_is_refused():
    with pytest.raises(UsageError) as info:
        as_loss("out.sum()", ["ignore_index=0"])
    assert info.value.message == "--loss-init constructs a loss class named by --loss, not an expression"
    assert info.value.hint == "e.g. --loss torch.nn:CrossEntropyLoss --loss-init ignore_index=0"
    with pytest.raises(UsageError) as info:
        as_loss(3)
    assert not callable(3)
    assert info.value.message == f"loss must be an expression or a callable, not a {type(3).__name__}"


@pytest.mark.parametrize("init", [["ignore_index"], ["weight=[1,"]], ids=["not KEY=VALUE", "not a literal"])
def test_a_loss_init_error_hints_the_loss_s_own_option_with_an_example_torch_takes(init):
    """The hint is --loss-init's, not forward's --init (whose example, hidden=16, is a model's)."""
    import ast

    with pytest.raises(UsageError) as info:
        as_loss("torch.nn:CrossEntropyLoss", init)
    assert info.value.hint == ("KEY=VALUE, VALUE a Python literal (numbers, strings, True/False/None, tuples, lists): "
                               "e.g. --loss-init ignore_index=0 --loss-init reduction=\"'sum'\"")
    # The example as the shell hands it over (reduction='sum'), read as Python literals: torch takes it.
    torch.nn.CrossEntropyLoss(ignore_index=ast.literal_eval("0"), reduction=ast.literal_eval("'sum'"))
