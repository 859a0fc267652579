"""The `--var` constructor table: the randint row, its refusals, integer leaves in trace and
check, and that a new constructor is one row (nothing else to edit)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from gradcli import limits
from gradcli.interpret import constructors
from gradcli.interpret.constructors import CONSTRUCTORS, Constructor, Values
from gradcli.interpret.variables import make_leaves, parse_var
from gradcli.errors import LimitError, VariableError
from paths import FIXTURES


def leaf(spec: str, seed: int = 0, **kwargs) -> torch.Tensor:
    name = spec.partition("=")[0]
    return make_leaves((name,), [spec], seed=seed, **kwargs).tensors[name]


@pytest.mark.parametrize(
    ("spec", "shape"),
    [("t=randint(0, 100, (2, 8))", (2, 8)), ("t=randint(0, 10, 32)", (32,)), ("t=randint(-5, 5, 2, 3)", (2, 3)),
     ("t=randint(0, 10, [4])", (4,)), ("t=randint(0, 10, ())", ())],
)
def test_randint_gives_long_data_of_the_shape_without_grad(spec, shape):
    tensor = leaf(spec)
    assert tensor.shape == shape
    assert tensor.dtype == torch.long
    assert not tensor.requires_grad and tensor.is_leaf
    low, high = (-5, 5) if "-5" in spec else (0, 100 if "100" in spec else 10)
    assert bool((tensor >= low).all()) and bool((tensor < high).all())


def test_randint_ignores_the_float_dtype_and_repeats_with_the_seed():
    a = leaf("t=randint(0, 1000, 50)", seed=7, dtype="float32")
    b = leaf("t=randint(0, 1000, 50)", seed=7)
    c = leaf("t=randint(0, 1000, 50)", seed=8)
    assert a.dtype == torch.long and torch.equal(a, b)
    assert not torch.equal(a, c)
    # the same values torch draws from a generator seeded alike
    assert torch.equal(a, torch.randint(0, 1000, (50,), generator=torch.Generator().manual_seed(7)))


def test_randint_draws_every_value_of_a_small_range():
    tensor = leaf("t=randint(3, 6, 3000)")
    assert sorted(tensor.unique().tolist()) == [3, 4, 5]


def test_tuple_shapes_parse_for_every_sized_constructor():
    assert leaf("x=randn((3, 2))").shape == (3, 2)
    assert leaf("x=ones((2, 2))").shape == (2, 2)
    assert torch.equal(leaf("x=full((2,), 0.5)").detach(), torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert leaf("x=uniform(0.1, 2, (5, 4))").shape == (5, 4)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("randint(5, 5, 3)", "randint(low, high, shape) needs low < high (high is excluded), not 5 and 5"),
        ("randint(9, 2, 3)", "randint(low, high, shape) needs low < high (high is excluded), not 9 and 2"),
        ("randint(0, 10, -3)", "randint(): sizes are non-negative integers"),
        ("randint(0, 10, (2, -1))", "randint(): sizes are non-negative integers"),
        ("randint(0, 10, 2.5)", "randint(): sizes are non-negative integers"),
        ("randint(0.5, 10, 3)", "randint(): low is an integer (up to 2^53 in magnitude)"),
        ("randint(0, inf, 3)", "randint(): high is an integer (up to 2^53 in magnitude)"),
        ("randint(0, 1e17, 3)", "randint(): high is an integer (up to 2^53 in magnitude)"),
        ("randint((0, 1), 10, 3)", "randint(): expected a number here, not a tuple"),
        ("randint(0, 10, (2, 3), 4)", "randint(): give the shape as sizes or as one tuple, e.g. randint(..., 2, 8) or randint(..., (2, 8))"),
        ("randint(0, 10)", "randint() got 2 arguments"),
        ("randint(0, 10, shape=3)", "randint() takes positional arguments only"),
    ],
)
def test_randint_refusals_name_the_problem_with_the_usage(text, message):
    with pytest.raises(VariableError) as info:
        parse_var(f"t={text}")
    assert info.value.message == message
    assert info.value.hint == CONSTRUCTORS["randint"].usage
    assert info.value.span is not None  # a caret under the call


@pytest.mark.parametrize("text", ["randint(0, 10, (100000, 100000))", "randint(0, 10, 100000, 100000)",
                                  f"randint(0, 2, {limits.MAX_ELEMENTS + 1})"])
def test_huge_randint_is_refused_before_any_allocation(text, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("allocated")

    monkeypatch.setattr(torch, "randint", forbidden)
    with pytest.raises(LimitError, match=r"randint\(\.\.\.\) would have .* elements; the limit is 50,000,000"):
        make_leaves(("t",), [f"t={text}"], seed=0)


def test_the_total_limit_counts_integer_data_before_any_allocation(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("allocated")

    monkeypatch.setattr(torch, "randint", forbidden)
    monkeypatch.setattr(torch, "randn", forbidden)
    each = limits.MAX_TOTAL_ELEMENTS // 3 + 1  # within the per-tensor limit; three are beyond the total
    assert each <= limits.MAX_ELEMENTS
    with pytest.raises(LimitError, match="the variables have .* elements in all"):
        make_leaves(("t", "u", "x"), [f"t=randint(0, 5, {each})", f"u=randint(0, 5, (1, {each}))", f"x=randn({each})"],
                    seed=0)


def test_too_many_dimensions_is_a_limit():
    with pytest.raises(LimitError, match=r"randint\(\): at most 8 dimensions"):
        parse_var("t=randint(0, 2, (1, 1, 1, 1, 1, 1, 1, 1, 1))")


def test_the_existing_refusals_keep_their_words():
    cases = {
        "randn(inf)": "randn(): arguments must be finite",
        "uniform(2, 1, 3)": "uniform(low, high, ...) needs low < high",
        "arange(0, 1, 0)": "arange(): the step cannot be 0",
        "full(-1, 0.5)": "full(): sizes are non-negative integers",
        "linspace(0, 1)": "linspace() got 2 arguments",
    }
    for text, message in cases.items():
        with pytest.raises(VariableError) as info:
            parse_var(f"x={text}")
        assert info.value.message == message, text
    assert torch.isnan(leaf("x=full(2, nan)").detach()).all()  # a nan fill value is a value to trace


def test_a_new_constructor_is_one_row(monkeypatch):
    """A row added to the table is parsed, sized, limited, made, hinted and documented."""

    def shape(name, args):
        return constructors._sizes(name, args)

    def make(args, shape, generator, factory):
        return torch.full(shape, 2.0, **factory)

    row = Constructor("twos", "twos(2, 3): a tensor of twos", (1, 8), shape, make)
    monkeypatch.setitem(CONSTRUCTORS, "twos", row)
    tensor = leaf("x=twos(2, 3)", dtype="float32")
    assert torch.equal(tensor.detach(), torch.full((2, 3), 2.0)) and tensor.requires_grad
    with pytest.raises(LimitError, match="twos"):
        parse_var("x=twos(100000, 100000)")
    with pytest.raises(VariableError) as info:
        parse_var("x=twos(-1)")
    assert info.value.hint == "twos(2, 3): a tensor of twos"
    with pytest.raises(VariableError, match="did you mean 'twos'"):
        parse_var("x=twoss(3)")
    assert "twos(2, 3)" in constructors.described()


def test_an_integer_row_makes_data_without_grad(monkeypatch):
    def make(args, shape, generator, factory):
        return torch.arange(math.prod(shape), **factory).reshape(shape)

    row = Constructor("ids", "ids(4): 0, 1, 2, ...", (1, 8), constructors._shape_sized, make, values=Values.INTEGER)
    monkeypatch.setitem(CONSTRUCTORS, "ids", row)
    tensor = leaf("t=ids(2, 2)")
    assert torch.equal(tensor, torch.tensor([[0, 1], [2, 3]])) and not tensor.requires_grad
    assert parse_var("t=ids(3)").integer and not parse_var("t=ids(3)").random


def test_the_help_lists_every_row():
    from gradcli.cli.app import SeedOption, VarOption

    var_help = VarOption.__metadata__[0].help
    seed_help = SeedOption.__metadata__[0].help
    for row in CONSTRUCTORS.values():
        assert row.example in var_help
        assert (row.name in seed_help) == row.random


# trace and check with an integer variable ----------------------------------------------------


def test_trace_lists_integer_data_as_a_leaf_without_gradient(cli):
    result = cli("trace", "(w * t).sum()", "--var", "w=[1.0, 2.0, 3.0]", "--var", "t=randint(0, 10, 3)",
                 "--seed", "0", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    leaves = {leaf["name"]: leaf for leaf in document["leaves"]}
    t = torch.randint(0, 10, (3,), generator=torch.Generator().manual_seed(0))
    assert leaves["t"]["dtype"] == "int64" and leaves["t"]["requires_grad"] is False
    assert leaves["t"]["grad"] is None and leaves["t"]["value"] == t.tolist()
    # d/dw sum(w*t) = t
    assert leaves["w"]["grad"] == [float(v) for v in t.tolist()]


def test_trace_refuses_a_program_of_integer_data_only(cli):
    result = cli("trace", "(t * 2).sum()", "--var", "t=randint(0, 10, 4)")
    assert result.exit_code == 2
    assert "t holds integers (randint), data without a gradient" in result.stderr
    assert "Traceback" not in result.output


def test_trace_refuses_wrt_an_integer_variable(cli):
    result = cli("trace", "(w * t).sum()", "--var", "w=randn(3)", "--var", "t=randint(0, 10, 3)", "--wrt", "t")
    assert result.exit_code == 2
    assert "--wrt t: 't' holds integers (randint), data without a gradient" in result.stderr


@pytest.mark.parametrize(
    ("expr", "var", "message"),
    [
        ("sin(t)", ["t=randint(0, 10, 3)"], "nothing to check: t holds integers (randint)"),
        ("(w * t).sum()", ["w=randn(3)", "t=randint(0, 10, 3)"],
         "check compares the derivative in every variable, and t holds integers (randint)"),
    ],
)
def test_check_refuses_integer_variables(cli, expr, var, message):
    args = [a for v in var for a in ("--var", v)]
    result = cli("check", expr, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_check_ignores_an_integer_variable_the_output_does_not_use(cli):
    result = cli("check", "t = t * 2; sin(x)", "--var", "x=[0.5, 1.0]", "--var", "t=randint(0, 10, 2)")
    assert result.exit_code == 0, result.output


def test_check_function_with_only_integer_inputs_has_nothing_to_differentiate(cli):
    # Integer tensors are data for check-function (a loss's targets), so with x integer
    # nothing is left to check: said, exit 2.
    swish = FIXTURES / "functions.py"
    result = cli("check-function", f"{swish}:Swish", "--var", "x=randint(0, 5, 4)")
    assert result.exit_code == 2
    assert "forward has no floating tensor input to differentiate: x (int64 tensor), beta (float)" in result.stderr
