"""gradcli.check_function: wrong backwards are caught, located and their cause named."""

from __future__ import annotations


import pytest

from gradcli import check_function
from gradcli.errors import GradcliError, UsageError, UserCodeError
from paths import FIXTURES

FUNCTIONS = f"{FIXTURES / 'functions.py'}"


def run(name: str, **options):
    return check_function(f"{FUNCTIONS}:{name}", **options)


def test_a_right_function_passes_every_check():
    result = run("Swish", ref="x*sigmoid(beta*x)", order=2)
    assert result.ok, str(result)
    assert result.inputs.names == ["x", "beta"] and result.inputs.values[1] == 1.0  # beta passed as a number
    assert result.gradcheck.ok and result.gradgradcheck.ok
    assert result.ref_forward.ok and all(c.ok for c in result.ref_first + result.ref_second)
    assert str(result).splitlines()[-1].startswith("OK: ")


def test_non_tensor_arguments_take_var_numbers():
    result = run("Swish", var=["beta=2.0", "x=[0.5, -1.0]"], ref="x*sigmoid(2*x)")
    assert result.ok, str(result)
    assert result.inputs.values[1] == 2.0


def test_saving_a_forward_intermediate_is_right_at_first_order_and_wrong_at_second():
    result = run("SwishSavedSigmoid", var=["x=[0.5]"], ref="x*sigmoid(x)", order=2)
    assert not result.ok
    assert result.gradcheck.ok and result.gradgradcheck.ok is False
    assert all(c.ok for c in result.first)
    (mismatch,) = result.second[0].mismatches
    assert mismatch.at == 0.5
    # Second order differentiates w * out, w the seeded output weight: NOTES.md's true second
    # derivative 0.4412 and the saved-sigmoid one 0.2350, each times w.
    (w,) = result.output_weights
    assert 0.5 <= w < 1.5
    assert mismatch.expected == pytest.approx(0.4412 * w, abs=1e-4)
    assert mismatch.got == pytest.approx(0.2350 * w, abs=1e-4)
    assert result.ref_second[0].mismatches[0].expected == pytest.approx(0.441229 * w, abs=1e-6)
    assert "forward saved a tensor it computed (saved tensor 2 of 2 (shape [1]))" in result.causes[0].summary
    assert "shown: with it recomputed from the input" in result.causes[0].summary


def test_once_differentiable_is_not_twice_differentiable_by_design():
    # Issue 16: a declared limit, not a fault. The second-order checks do not run and the audit says why.
    result = run("SwishOnce", order=2)
    assert result.ok and all(c.ok for c in result.first) and not result.second
    assert result.gradgradcheck.ok is None
    assert "@once_differentiable: not twice differentiable, by design" in result.gradgradcheck.message
    assert [f.kind for f in result.audit.findings] == ["by design"]


@pytest.mark.parametrize("name, cause", [
    ("SquareScaled", "backward's gradient for x is 2 times the true one"),
    ("SinFlipped", "the sign is flipped"),
    ("LeakyWrongNegative", "wrong only where x <= 0 (right where x > 0)"),  # 0.01 at 0: neither side
    ("MulSwapped", "backward returns the gradients in the wrong order"),
])
def test_wrong_backwards_are_caught_and_explained(name, cause):
    result = run(name)
    assert not result.ok
    assert result.gradcheck.ok is False
    assert any(cause in c.summary for c in result.causes), result.causes
    assert cause in result.verdict()


def test_mismatches_say_which_input_where_expected_and_got():
    result = run("SquareScaled", var=["x=[1.5, -2.0]"])
    first = result.first[0].mismatches[0]
    assert (first.element, first.output, first.at, first.expected, first.got) == ("x[0]", "out[0]", 1.5, pytest.approx(3.0), 6.0)
    assert str(first) == "x[0] (= 1.5) -> out[0]: expected 3, got 6"


def test_two_inputs_right():
    result = run("MulRight", ref="x*exp(y)", order=2)
    assert result.ok, str(result)
    assert [c.name for c in result.first] == ["x", "y"]


def test_reference_forward_mismatch():
    result = run("Swish", ref="x*sigmoid(2*x)")
    assert not result.ok and not result.ref_forward.ok
    assert result.ref_forward.count == 13  # every default x but 0, where both are 0


def test_a_class_is_accepted():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fixture_functions", FUNCTIONS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert check_function(module.Swish, ref="x*sigmoid(x)").ok
    assert not check_function(module.SinFlipped).ok


@pytest.mark.parametrize("target, error, text", [
    ("missing.py:Swish", UsageError, "no file"),
    (f"{FUNCTIONS}:Nope", UsageError, "has no 'Nope'"),
    (f"{FUNCTIONS}:NotAFunction", UserCodeError, "not a torch.autograd.Function"),
    # Loaded as trace loads code: the user's own frames, as Python prints them, and no others.
    (f"{FIXTURES / 'broken_import.py'}:Never", UserCodeError, "broken_import.py\", line 5, in <module>\n    VALUE = 1 / 0"),
    (f"{FUNCTIONS}:RaisesInForward", UserCodeError, "forward is not written yet"),
    ("no_colon", UsageError, "not PATH.py:NAME"),
])
def test_bad_input(target, error, text):
    with pytest.raises(error) as info:
        check_function(target)
    assert isinstance(info.value, GradcliError)
    assert text in info.value.render()


def test_ref_with_an_unknown_variable():
    with pytest.raises(UsageError, match="--ref uses 'z'"):
        run("Swish", ref="z*x")


def test_ref_on_a_matrix_input_compares_every_element_first_and_second_order():
    # The forward's outputs are compared flattened; a 3x4 reference used to be expanded to the
    # flat 12 and escaped as torch's RuntimeError (a traceback) for any input of two dims.
    right = check_function(f"{FUNCTIONS}:Swish", ["x=[[0.5, -1.0, 2.0, 0.0], [1.5, -3.0, 4.0, -0.25], [3.0, 1.0, -2.0, 0.75]]"],
                ref="x*sigmoid(x)", order=2)
    assert right.ok, str(right)
    assert right.ref_forward.ok and right.ref_forward.count == 0
    assert [c.name for c in right.ref_first] == ["x"] and right.ref_first[0].count == 0
    assert [c.name for c in right.ref_second] == ["x"] and right.ref_second[0].count == 0
    wrong = check_function(f"{FUNCTIONS}:Swish", ["x=[[0.5, -1.0], [1.5, -3.0]]"], ref="x*sigmoid(2*x)")
    assert not wrong.ok and wrong.ref_forward.count == 4


def test_ref_with_another_number_of_values_is_a_usage_error():
    with pytest.raises(UsageError) as info:
        check_function(f"{FUNCTIONS}:Swish", ["x=[[0.5, -1.0, 2.0], [1.5, -3.0, 4.0]]"], ref="sum(x, dim=0)")
    assert info.value.render().startswith(
        "error: --ref sum(x, dim=0) has shape [3] (3 values), and the output of forward it is compared with has 6 values")
