"""check-function's typed inputs (issue 16, point 2): types inferred from forward's signature
(annotations, then defaults), --var read in that light, only floating tensors differentiated,
invented arguments named in errors, and `given` actual values (fn-discover's entry)."""

from __future__ import annotations

import inspect
from typing import Optional

import pytest
import torch

from gradcli import check_function
from gradcli.errors import UsageError, UserCodeError
from gradcli.verify.function.inputs import ArgKind, argument_type, make_inputs, value_for
from gradcli.interpret.variables import parse_var
from paths import FIXTURES, ROOT

TYPED = FIXTURES / "typed_functions.py"
# The README's typed Functions (the right SoftmaxCrossEntropy among them) live only there.
EXAMPLE = ROOT / "examples" / "typed_functions.py"


def run(name: str, *var: str, **options):
    return check_function(f"{TYPED}:{name}", list(var), **options)


def _parameter(annotation=inspect.Parameter.empty, default=inspect.Parameter.empty):
    return inspect.Parameter("a", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation, default=default)


@pytest.mark.parametrize("annotation, default, kind, optional", [
    (int, inspect.Parameter.empty, ArgKind.INT, False),
    ("int", inspect.Parameter.empty, ArgKind.INT, False),  # from __future__ import annotations
    (inspect.Parameter.empty, -1, ArgKind.INT, False),
    (inspect.Parameter.empty, 1.5, ArgKind.FLOAT, False),
    (inspect.Parameter.empty, True, ArgKind.BOOL, False),  # a bool default is not an int
    (float, 1, ArgKind.FLOAT, False),  # the annotation decides
    (torch.Tensor, inspect.Parameter.empty, ArgKind.TENSOR, False),
    ("torch.LongTensor", inspect.Parameter.empty, ArgKind.INTEGER_TENSOR, False),
    (torch.BoolTensor, inspect.Parameter.empty, ArgKind.BOOL_TENSOR, False),
    (Optional[torch.Tensor], None, ArgKind.TENSOR, True),
    ("Optional[int]", inspect.Parameter.empty, ArgKind.INT, True),
    ("torch.Tensor | None", inspect.Parameter.empty, ArgKind.TENSOR, True),
    (int | None, inspect.Parameter.empty, ArgKind.INT, True),
    (inspect.Parameter.empty, None, ArgKind.ANY, True),
    (inspect.Parameter.empty, inspect.Parameter.empty, ArgKind.ANY, False),
    (inspect.Parameter.empty, torch.tensor([1, 2]), ArgKind.INTEGER_TENSOR, False),
])
def test_argument_types_come_from_the_annotation_then_the_default(annotation, default, kind, optional):
    arg = argument_type(_parameter(annotation, default))
    assert (arg.kind, arg.optional) == (kind, optional)


@pytest.mark.parametrize("spec, kind, expected", [
    ("1", ArgKind.INT, 1),  # an int literal stays a Python int
    ("1", ArgKind.FLOAT, 1.0),
    ("2.5", ArgKind.FLOAT, 2.5),
    ("1", ArgKind.BOOL, True),
    ("none", ArgKind.INT, None),
    ("none", ArgKind.TENSOR, None),
])
def test_numbers_and_none_keep_their_python_type(spec, kind, expected):
    value = value_for(parse_var(f"a={spec}"), argument_type(_parameter(annotation=_KINDS[kind])), torch.Generator())
    assert value == expected and type(value) is type(expected)


_KINDS = {ArgKind.INT: int, ArgKind.FLOAT: float, ArgKind.BOOL: bool, ArgKind.TENSOR: torch.Tensor,
          ArgKind.INTEGER_TENSOR: torch.LongTensor, ArgKind.BOOL_TENSOR: torch.BoolTensor}


@pytest.mark.parametrize("spec, kind, dtype, differentiated", [
    ("[0, 2]", ArgKind.INTEGER_TENSOR, torch.long, False),  # ints for an integer parameter
    ("[0, 2]", ArgKind.INT, torch.long, False),
    ("2", ArgKind.INTEGER_TENSOR, torch.long, False),  # a 0-d index
    ("[1, 0]", ArgKind.BOOL_TENSOR, torch.bool, False),
    ("[0, 2]", ArgKind.TENSOR, torch.long, False),  # ints for a Tensor: int64, as torch.tensor([0, 2]) is
    ("randint(0, 3, (4,))", ArgKind.TENSOR, torch.long, False),
    ("[True, False]", ArgKind.TENSOR, torch.bool, False),
    ("[1.5]", ArgKind.FLOAT, torch.float64, True),  # a tensor for a numeric parameter (entmax's alpha)
    ("full(2, 1, 1.3)", ArgKind.FLOAT, torch.float64, True),
    ("2", ArgKind.TENSOR, torch.long, False),  # a number for a tensor parameter: a 0-d tensor, as torch.tensor(2)
    ("2.0", ArgKind.TENSOR, torch.float64, True),
])
def test_tensor_specs_take_the_dtype_forward_wants(spec, kind, dtype, differentiated):
    value = value_for(parse_var(f"a={spec}"), argument_type(_parameter(annotation=_KINDS[kind])), torch.Generator())
    assert isinstance(value, torch.Tensor) and value.dtype == dtype
    assert value.requires_grad is differentiated


def test_entmax_alpha_as_a_tensor_is_differentiated_and_right():
    result = run("EntmaxBisect", "alpha=[1.5]")
    assert result.ok, str(result)
    assert [c.name for c in result.first] == ["X", "alpha"]
    assert result.inputs.values[2] == -1 and result.inputs.values[3] == 80  # dim and n_iter: their defaults
    assert "alpha = [1.5]" in str(result)


def test_entmax_alpha_gradient_off_by_a_factor_is_caught():
    result = run("EntmaxBisectAlphaWrong", "alpha=[1.5]")
    assert not result.ok and result.gradcheck.ok is False
    assert [c.ok for c in result.first] == [True, False]  # d/dX right, d/dalpha wrong
    assert all(m.element == "alpha[0]" for m in result.first[1].mismatches)


def test_entmax_alpha_as_a_number_is_passed_as_it_is():
    result = run("EntmaxBisectAlphaWrong")  # alpha = 1.5, a number: not differentiated, so not checked
    assert result.ok and [c.name for c in result.first] == ["X"]
    assert result.inputs.values[1] == 1.5 and type(result.inputs.values[1]) is float


def test_entmax_on_rows_with_dim_an_int():
    result = run("EntmaxBisect", "X=randn(2, 4)", "alpha=full(2, 1, 1.3)", "dim=1", seed=3)
    assert result.ok, str(result)
    assert result.inputs.values[2] == 1 and type(result.inputs.values[2]) is int


def test_a_loss_with_integer_targets():
    right = check_function(f"{EXAMPLE}:SoftmaxCrossEntropy", ["logits=randn(4, 3)", "target=randint(0, 3, (4,))"])
    assert right.ok, str(right)
    assert [c.name for c in right.first] == ["logits"]
    assert right.inputs.values[1].dtype == torch.long and not right.inputs.values[1].requires_grad
    wrong = run("SoftmaxCrossEntropySum", "logits=randn(4, 3)", "target=[0, 2, 1, 1]")  # annotated LongTensor
    assert not wrong.ok
    assert wrong.inputs.values[1].tolist() == [0, 2, 1, 1] and wrong.inputs.values[1].dtype == torch.long
    assert any("4 times the true one" in c.summary for c in wrong.causes), wrong.causes  # forgot the batch mean


def test_a_bool_mask():
    mask = "mask=[True, False, True, False, False, False, True, False, False, False, False, False, False, False]"
    right = run("MaskedFill", mask)
    assert right.ok, str(right)
    assert right.inputs.values[1].dtype == torch.bool
    wrong = run("MaskedFillLeaky", mask)
    assert not wrong.ok
    # The wrong entries are exactly the masked ones: d out_i / d x_i is 1 where 0 is right.
    mismatched = {int(m.element[2:-1]) for m in wrong.first[0].mismatches}
    assert mismatched == {0, 2, 6}


def test_none_and_an_optional_tensor():
    assert run("Scale").inputs.values[1] is None  # default None
    assert run("Scale", "scale=none").ok
    scaled = run("Scale", "scale=[2.0]")
    assert scaled.ok and [c.name for c in scaled.first] == ["x", "scale"]


def test_an_int_without_default_is_invented_and_said():
    result = run("LogSoftmaxDim")
    assert result.ok
    assert result.inputs.values[1] == -1 and result.inputs.defaulted == ["x", "dim"]


@pytest.mark.parametrize("file, name, invented", [
    (TYPED, "Repeat", "gradcli invented x, times (no --var, no default): x = [-6.0, -4.0, -3.0, -1.5, -1.0, -0.5, 0.0, "
                      "0.25, 0.5, 1.0, 1.5, 3.0, 3.5, 4.0]; times = -1; give real values with --var NAME=SPEC"),
    (EXAMPLE, "SoftmaxCrossEntropy", "gradcli invented logits, target (no --var, no default)"),
])
def test_an_error_caused_by_invented_arguments_says_what_gradcli_passed(cli, file, name, invented):
    result = cli("check-function", f"{file}:{name}")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {name}.forward raised RuntimeError")
    assert invented in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


def test_no_invented_arguments_no_note():
    with pytest.raises(UserCodeError) as info:
        run("Repeat", "x=[1.0]", "times=-1")
    assert "invented" not in info.value.render()


def test_given_values_are_used_instead_of_var_and_defaults():
    logits = torch.randn(3, 4, dtype=torch.float32)
    target = torch.tensor([3, 0, 1])
    result = check_function(f"{EXAMPLE}:SoftmaxCrossEntropy", given={"logits": logits, "target": target})
    assert result.ok, str(result)
    used = result.inputs.values
    assert used[0].dtype == torch.float64 and used[0].requires_grad and torch.equal(used[0], logits.double())
    assert used[1].dtype == torch.long and torch.equal(used[1], target)
    assert result.inputs.origins == ["given", "given"] and result.inputs.defaulted == []
    assert not logits.requires_grad  # the caller's tensor is untouched


def test_given_and_var_together():
    result = check_function(f"{TYPED}:EntmaxBisect", ["alpha=[1.3]"], given={"X": torch.randn(2, 5), "dim": 1})
    assert result.ok, str(result)
    assert result.inputs.origins == ["given", "--var", "given", "default"]
    assert [c.name for c in result.first] == ["X", "alpha"]


def test_a_given_name_forward_does_not_take_is_refused():
    with pytest.raises(UsageError, match="given y: SoftmaxCrossEntropy.forward has no input 'y'"):
        check_function(f"{EXAMPLE}:SoftmaxCrossEntropy", given={"y": 1})


class _Signature(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index: torch.LongTensor, mask: torch.BoolTensor, dim: int, scale: float = 2.0,
                weight: Optional[torch.Tensor] = None, flag=False):
        return x


def test_make_inputs_types_origins_and_invented_values():
    inputs = make_inputs(_Signature, ["x=[[1.0, 2.0], [3.0, 4.0]]", "scale=3"], seed=0)
    assert inputs.origins == ["--var", "invented", "invented", "invented", "--var", "default", "default"]
    assert inputs.defaulted == ["index", "mask", "dim"]
    x, index, mask, dim, scale, weight, flag = inputs.values
    assert x.shape == (2, 2) and x.requires_grad
    assert index.tolist() == [k % 3 for k in range(14)] and index.dtype == torch.long
    assert mask.tolist() == [True, False] * 7
    assert (dim, scale, weight, flag) == (-1, 3.0, None, False) and type(scale) is float
    assert inputs.tensor == [True, False, False, False, False, False, False]
    assert [a["kind"] for a in inputs.as_dicts()] == ["any", "integer tensor", "bool tensor", "int", "float", "tensor", "bool"]


@pytest.mark.parametrize("text, kind, written", [
    ("1", "number", "integer"), ("-1", "number", "integer"), ("1.0", "number", "float"), ("pi", "number", "float"),
    ("[0, 2]", "list", "integer"), ("[0, 2.5]", "list", "float"), ("[[True], [False]]", "list", "bool"),
    ("none", "none", "float"), ("randint(0, 3, 4)", "constructor", "integer"), ("randn(2)", "constructor", "float"),
])
def test_specs_remember_how_their_literals_were_written(text, kind, written):
    spec = parse_var(f"a={text}")
    assert (spec.kind, spec.written.value) == (kind, written)


def test_a_mask_mixed_with_numbers_is_refused(cli):
    result = cli("check-function", f"{TYPED}:MaskedFill", "--var", "mask=[True, 0]")
    assert result.exit_code == 2
    assert "a mask is all True and False, without numbers" in result.stderr


def test_trace_takes_a_mask_as_data_and_refuses_none(cli):
    result = cli("trace", "(x * m).sum()", "--var", "x=[1.0, 2.0]", "--var", "m=[True, False]", "--json")
    assert result.exit_code == 0, result.stderr
    import json

    leaves = {leaf["name"]: leaf for leaf in json.loads(result.stdout)["leaves"]}
    assert leaves["m"]["dtype"] == "bool" and leaves["m"]["requires_grad"] is False
    assert leaves["x"]["grad"] == [1.0, 0.0]
    refused = cli("trace", "x.sum()", "--var", "x=none")
    assert refused.exit_code == 2 and "--var x=none: None is not a tensor" in refused.stderr
