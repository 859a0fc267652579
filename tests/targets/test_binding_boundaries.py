"""Input binding (targets/inputs.py) at the cases that decide it; the truth is the model or
function called by hand with the same values, and torch's autograd on them.

- the sole input: a forward with exactly one REQUIRED input (others may have defaults) takes
  the one --var that names no parameter; two required inputs do not; a --var the loss reads is
  taken when it is the only unknown, and passed over for one the loss does not read;
- the leaves: a module's tensor inputs are data unless --wrt names them, a function's floating
  inputs require grad, an integer tensor never does, and a tensor given from Python is the
  caller's own unless it must be made a leaf that requires grad.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradcli.errors import UsageError, VariableError
from gradcli.targets.inputs import bind_inputs

X = [[0.5, -1.0, 2.0], [1.0, 0.25, -0.75]]


class OneInput(nn.Module):
    """One required input and one with a default: still one input to bind."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, input, scale: float = 2.0):
        return self.fc(input) * scale


class TwoInputs(OneInput):
    def forward(self, a, b):
        return self.fc(a) * self.fc(b)


def _bind(fn, *variables, loss_names=(), data_inputs=True, wrt=(), values=(), named=None):
    return bind_inputs(fn, "model", list(variables), list(values), dict(named or {}), dtype="float32", device="cpu",
                       seed=0, data_inputs=data_inputs, loss_names=loss_names, wrt=wrt)


def test_one_required_input_beside_a_default_takes_the_unknown_var():
    torch.manual_seed(0)
    model = OneInput()
    bound = _bind(model.forward, f"x={X}")
    assert bound.renamed == {"x": "input"}
    assert torch.equal(model(*bound.args, **bound.kwargs), model(torch.tensor(X)))  # torch, by hand
    assert torch.equal(bound.tensors["x"], torch.tensor(X))


def test_a_var_for_the_optional_parameter_leaves_the_unknown_var_to_the_input():
    """--var x=... --var scale=3: x is the input, scale the option (as docstring and docs say)."""
    torch.manual_seed(0)
    model = OneInput()
    bound = _bind(model.forward, f"x={X}", "scale=3")
    assert bound.renamed == {"x": "input"}
    assert torch.equal(model(*bound.args, **bound.kwargs), model(torch.tensor(X), scale=3.0))  # torch, by hand


def test_naming_the_input_itself_takes_no_other_var():
    with pytest.raises(VariableError, match="has no input 'x'"):
        _bind(OneInput().forward, f"input={X}", f"x={X}")


def test_two_required_inputs_take_no_unknown_var():
    with pytest.raises(VariableError, match="has no input 'x'"):
        _bind(TwoInputs().forward, f"x={X}")


def test_an_input_given_from_python_takes_no_unknown_var():
    with pytest.raises(VariableError, match="has no input 'x'"):
        _bind(OneInput().forward, f"x={X}", values=[torch.tensor(X)])


def test_the_only_unknown_var_is_taken_even_when_the_loss_reads_it():
    torch.manual_seed(0)
    model = OneInput()
    bound = _bind(model.forward, f"x={X}", loss_names=("x",))
    assert bound.renamed == {"x": "input"}
    assert torch.equal(model(*bound.args, **bound.kwargs), model(torch.tensor(X)))


def test_of_two_unknown_vars_the_one_the_loss_does_not_read_is_the_input():
    torch.manual_seed(0)
    model = OneInput()
    bound = _bind(model.forward, f"x={X}", "labels=[1, 0]", loss_names=("labels",))
    assert bound.renamed == {"x": "input"}
    assert torch.equal(model(*bound.args, **bound.kwargs), model(torch.tensor(X)))
    assert torch.equal(bound.tensors["labels"], torch.tensor([1, 0]))  # class indices, as torch reads them


def test_two_unknown_vars_neither_read_by_the_loss_are_refused():
    with pytest.raises(VariableError, match="has no input 'x'"):
        _bind(OneInput().forward, f"x={X}", "y=[1.0]")


def test_two_unknown_vars_both_read_by_the_loss_are_not_guessed_between():
    """Either could be the input: none is taken, and forward's input is said to be missing."""
    with pytest.raises(UsageError, match="needs the input 'input'"):
        _bind(OneInput().forward, f"x={X}", "y=[1.0]", loss_names=("x", "y"))


@pytest.mark.parametrize("wrt", [(), ("x",)])
def test_a_module_s_input_requires_grad_only_when_wrt_names_it(wrt):
    torch.manual_seed(0)
    model = OneInput()
    bound = _bind(model.forward, f"x={X}", wrt=wrt)
    x = bound.tensors["x"]
    assert x.requires_grad is bool(wrt) and x.is_leaf
    if wrt:  # its gradient is torch's, by hand
        leaf = torch.tensor(X, requires_grad=True)
        (truth,) = torch.autograd.grad(model(leaf).sum(), leaf)
        (got,) = torch.autograd.grad(model(*bound.args, **bound.kwargs).sum(), x)
        assert torch.equal(got, truth)


def test_a_function_s_floating_inputs_require_grad_and_its_integer_ones_never():
    def f(x, idx):
        return x[idx].sum()

    bound = _bind(f, "x=[1.0, 2.0, 3.0]", "idx=randint(0, 3, (2,))", data_inputs=False)
    x, idx = bound.tensors["x"], bound.tensors["idx"]
    assert x.requires_grad and x.is_leaf and idx.dtype == torch.int64 and not idx.requires_grad
    (got,) = torch.autograd.grad(f(*bound.args, **bound.kwargs), x)
    leaf = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (truth,) = torch.autograd.grad(f(leaf, idx.clone()), leaf)  # torch, by hand, on the same indices
    assert torch.equal(got, truth)


def test_a_tensor_given_from_python_is_the_caller_s_unless_it_must_require_grad():
    model = OneInput()
    mine = torch.tensor(X)
    kept = _bind(model.forward, values=[mine])
    assert kept.tensors["input"] is mine  # data: the caller's own tensor
    wanted = _bind(model.forward, values=[mine], wrt=("input",))
    assert wanted.tensors["input"] is not mine and wanted.tensors["input"].requires_grad
    assert not mine.requires_grad  # the caller's tensor is left as it was
    already = torch.tensor(X, requires_grad=True)
    assert _bind(model.forward, values=[already], wrt=("input",)).tensors["input"] is already
