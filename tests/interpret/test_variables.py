"""`--var NAME=SPEC`: every form docs/cli.md lists, defaults, seeds, dtypes, and refusals.

Sizes are known from the spec text alone, so oversized specs are refused before any
allocation: the tests patch torch's factories to record calls and check none happened.
"""

from __future__ import annotations

import math

import pytest
import torch

from gradcli import limits
from gradcli.errors import LimitError, VariableError
from gradcli.interpret.variables import DEFAULT_SCALARS, make_leaves, parse_var


def one(spec: str, **kwargs) -> torch.Tensor:
    name = spec.partition("=")[0].strip()
    return make_leaves((name,), [spec], seed=kwargs.pop("seed", 0), **kwargs).tensors[name]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("x=1.5", torch.tensor(1.5, dtype=torch.float64)),
        ("x=-2", torch.tensor(-2.0, dtype=torch.float64)),
        ("x=pi", torch.tensor(math.pi, dtype=torch.float64)),
        ("x=[1,2,3]", torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)),
        ("x=[[1,2],[3,4]]", torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)),
        ("x=ones(2,2)", torch.ones(2, 2, dtype=torch.float64)),
        ("x=zeros(3)", torch.zeros(3, dtype=torch.float64)),
        ("x=full(3, 0.5)", torch.full((3,), 0.5, dtype=torch.float64)),
        ("x=arange(0,1,0.25)", torch.tensor([0.0, 0.25, 0.5, 0.75], dtype=torch.float64)),
        ("x=arange(4)", torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)),
        ("x=linspace(-3,3,101)", torch.linspace(-3, 3, 101, dtype=torch.float64)),
        ("x = [ -1.5, 2e-3 ]", torch.tensor([-1.5, 0.002], dtype=torch.float64)),
    ],
)
def test_deterministic_forms_give_exact_values(spec, expected):
    tensor = one(spec)
    assert tensor.dtype == torch.float64
    assert tensor.requires_grad and tensor.is_leaf
    assert torch.equal(tensor.detach(), expected)


def test_random_forms_have_the_right_shape_range_and_distribution():
    randn = one("x=randn(3,3)")
    assert randn.shape == (3, 3) and randn.dtype == torch.float64 and randn.requires_grad
    rand = one("x=rand(4000)")
    assert rand.shape == (4000,) and 0 <= rand.min().item() and rand.max().item() < 1
    assert abs(rand.mean().item() - 0.5) < 0.03  # 4000 uniforms: sd of the mean is 0.0046
    uniform = one("x=uniform(0.1,2,50)")
    assert uniform.shape == (50,)
    assert 0.1 <= uniform.min().item() and uniform.max().item() < 2
    big = one("x=randn(20000)")
    assert abs(big.mean().item()) < 0.05 and abs(big.std().item() - 1) < 0.05


def test_seed_makes_random_values_reproducible():
    a = make_leaves(("x", "y"), ["x=randn(5)", "y=uniform(-1, 1, 3)"], seed=42)
    b = make_leaves(("x", "y"), ["x=randn(5)", "y=uniform(-1, 1, 3)"], seed=42)
    c = make_leaves(("x", "y"), ["x=randn(5)", "y=uniform(-1, 1, 3)"], seed=43)
    assert torch.equal(a.tensors["x"], b.tensors["x"]) and torch.equal(a.tensors["y"], b.tensors["y"])
    assert not torch.equal(a.tensors["x"], c.tensors["x"])
    assert a.seed == 42
    # without --seed a seed is drawn and reported, and repeating with it gives the same values
    d = make_leaves(("x",), ["x=randn(5)"])
    e = make_leaves(("x",), ["x=randn(5)"], seed=d.seed)
    assert torch.equal(d.tensors["x"], e.tensors["x"])
    # the values are the same whatever the --dtype (drawn in float64, then converted)
    f = make_leaves(("x",), ["x=randn(5)"], seed=42, dtype="float32")
    assert torch.equal(f.tensors["x"], a.tensors["x"].float())


@pytest.mark.parametrize(("dtype", "torch_dtype"), [("float64", torch.float64), ("float32", torch.float32),
                                                    ("float16", torch.float16), ("bfloat16", torch.bfloat16)])
def test_integer_lists_become_the_chosen_dtype(dtype, torch_dtype):
    tensor = one("x=[1, 2, 3]", dtype=dtype)
    assert tensor.dtype == torch_dtype and tensor.requires_grad
    assert tensor.tolist() == [1.0, 2.0, 3.0]
    assert one("x=arange(3)", dtype=dtype).dtype == torch_dtype
    assert one("x=2", dtype=dtype).dtype == torch_dtype


def test_variables_without_a_var_get_the_documented_defaults_in_order():
    leaves = make_leaves(("x", "y", "z"), ["y=[1, 2]"], seed=0)
    assert leaves.defaulted == ["x", "z"]
    # defaults follow the variable's position: x is the first, z the third
    assert leaves.tensors["x"].item() == DEFAULT_SCALARS[0] == 0.5
    assert leaves.tensors["z"].item() == DEFAULT_SCALARS[2] == -0.75
    assert leaves.tensors["x"].requires_grad
    assert leaves.specs["x"].text == "0.5"
    custom = make_leaves(("x",), [], default=lambda name, index: "linspace(0, 1, 3)")
    assert custom.tensors["x"].tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize(
    ("spec", "kind", "message", "hint"),
    [
        ("x=[[1,2],[3]]", VariableError, "the list is ragged", "every row of a tensor needs the same length"),
        ("x=[1,[2]]", VariableError, "the list is ragged", None),
        ("x=[]", VariableError, "an empty list has no values", None),
        ("x=rnadn(3)", VariableError, "unknown constructor 'rnadn'", "did you mean 'randn'?"),
        ("x=lnspace(0, 1, 3)", VariableError, "unknown constructor 'lnspace'", "did you mean 'linspace'?"),
        ("x=os.system('true')", VariableError, "unknown constructor 'os.system'", None),
        ("x=__import__('os')", VariableError, "unknown constructor '__import__'", None),
        ("x=randn(3, seed=1)", VariableError, "randn() takes positional arguments only", None),
        ("x=randn()", VariableError, "randn() got 0 arguments", None),
        ("x=randn(-1)", VariableError, "sizes are non-negative integers", None),
        ("x=randn(2.5)", VariableError, "sizes are non-negative integers", None),
        ("x=full(3)", VariableError, "full() got 1 arguments", "shape, then the fill value"),
        ("x=uniform(2, 1, 3)", VariableError, "needs low < high", None),
        ("x=uniform(0, inf, 3)", VariableError, "arguments must be finite", None),
        ("x=arange(0, 1, 0)", VariableError, "the step cannot be 0", None),
        ("x=1+2", VariableError, "expected a number, a list of numbers, or a constructor", None),
        ("x='a'", VariableError, "expected a number", None),
        ("x=3j", VariableError, "expected a number", None),
        ("x=True", VariableError, "expected a number", None),
        ("x=y", VariableError, "expected a number", None),
        ("x=[1,", VariableError, "cannot read the value", None),
        ("x=", VariableError, "--var x= has no value", None),
        ("x", VariableError, "--var 'x' is not NAME=SPEC", "--var x=1.5"),
        ("=1", VariableError, "is not NAME=SPEC", None),
        ("__x=1", VariableError, "'__x' is not a valid variable name", None),
        ("pi=1", VariableError, "'pi' is not a valid variable name", None),
        ("x=1\x00", VariableError, "null byte", None),
        ("x=" + "1" + "0" * 400, LimitError, "the number is larger than 1e+300", None),
        ("x=" + "[" * 40 + "1" + "]" * 40, LimitError, "nested more than 32 levels", None),
        ("x=" + "[" * 300 + "1" + "]" * 300, LimitError, "nested too deeply", None),
    ],
)
def test_bad_specs_are_refused_with_a_message(spec, kind, message, hint):
    with pytest.raises(kind) as info:
        parse_var(spec)
    assert message in info.value.message
    if hint is not None:
        assert hint in info.value.hint
    assert info.value.render().startswith("error: ")


def test_spec_errors_put_a_caret_under_the_spec():
    with pytest.raises(VariableError) as info:
        parse_var("x=[1, 2, 'a']")
    rendered = info.value.render()
    assert "in --var x, column 8:" in rendered
    assert "    [1, 2, 'a']\n           ^~~" in rendered


@pytest.fixture
def no_allocation(monkeypatch):
    """Record every call of torch's factories: refusals must come before any."""
    calls: list[str] = []
    for name in ["randn", "rand", "ones", "zeros", "full", "arange", "linspace", "tensor", "empty"]:
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
    return calls


@pytest.mark.parametrize(
    "spec",
    ["x=randn(100000,100000)", "x=ones(1e20)", "x=full(100000, 100000, 0.5)", "x=arange(0, 1e18)",
     "x=linspace(0, 1, 1e12)", "x=uniform(0, 1, 100000, 100000)", "x=randn(1e300, 1e300)", "x=arange(1e308)",
     "x=zeros(8000, 8000)"],
)
def test_huge_shapes_are_refused_without_allocation(spec, no_allocation):
    with pytest.raises(LimitError) as info:
        make_leaves(("x",), [spec], seed=0)
    assert f"the limit is {limits.MAX_ELEMENTS:,} per tensor" in info.value.message
    assert no_allocation == []


def test_the_total_element_limit_counts_every_variable_before_allocating(no_allocation):
    specs = ["x=randn(20000000)", "y=zeros(20000000)", "z=ones(15000000)"]
    with pytest.raises(LimitError) as info:
        make_leaves(("x", "y", "z"), specs, seed=0)
    assert info.value.message == "the variables have 55,000,000 elements in all; the limit is 50,000,000"
    assert no_allocation == []


def test_a_spec_at_the_limit_is_accepted(monkeypatch):
    monkeypatch.setattr(limits, "MAX_ELEMENTS", 12)
    assert one("x=ones(3, 4)").shape == (3, 4)
    with pytest.raises(LimitError):
        parse_var("x=ones(13)")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["x=1", "x=2"], "--var x is given twice"),
        (["y=1"], "--var y names no variable of the expression"),
    ],
)
def test_var_options_must_match_the_expression(options, message):
    with pytest.raises(VariableError) as info:
        make_leaves(("x",), options, seed=0)
    assert info.value.message == message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtype": "int64"}, "unknown --dtype 'int64'"),
        ({"dtype": "double"}, "unknown --dtype 'double'"),
        ({"device": "gpu"}, "unknown --device 'gpu'"),
        ({"device": ""}, "unknown --device ''"),
        ({"device": "meta"}, "--device meta: gradcli needs a device that holds values"),
    ],
)
def test_bad_dtype_and_device(kwargs, message):
    with pytest.raises(VariableError) as info:
        make_leaves(("x",), ["x=1"], seed=0, **kwargs)
    assert info.value.message == message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(VariableError) as info:
        make_leaves(("x",), ["x=1"], seed=0, device="cuda")
    assert info.value.message == "--device cuda: no CUDA device is available here"
    assert info.value.hint == "use --device cpu"


@pytest.mark.parametrize("spec", ["1e400", "-1e400", "[1e308, 1e309]", "full(3, 1e400)"])
def test_a_literal_that_overflows_float64_is_refused_not_read_as_inf(spec):
    # Python reads 1e400 as inf without a word; `inf` written as such stays allowed.
    with pytest.raises(LimitError) as info:
        parse_var(f"x={spec}")
    assert info.value.render().startswith("error: the number overflows a float64\n  in --var x, column ")
    assert "hint: write inf for an infinity" in info.value.render()
    assert parse_var("x=[inf, -inf]").args == ([math.inf, -math.inf],)
