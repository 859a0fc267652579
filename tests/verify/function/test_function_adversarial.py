"""check-function against legitimate code written to make it give a wrong verdict.

Each test here failed before its fix. The Functions are tests/fixtures/adversarial_functions.py;
expected values are hand-written derivatives with explicit tolerances.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from gradcli import check_function
from gradcli.verify.finite_differences.jacobian import analytical, numerical
from gradcli.verify.function.kinks import one_sided_kinks
from gradcli.verify.finite_differences.precision import grid
from gradcli.verify.function.userfile import DEFAULT_INPUT
from paths import FIXTURES

FUNCTIONS = FIXTURES / "adversarial_functions.py"


def run(name: str, **options):
    return check_function(f"{FUNCTIONS}:{name}", **options)


def fixture(name: str):
    spec = importlib.util.spec_from_file_location("adversarial_fixtures", FUNCTIONS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


# --- a forward that computes in float32 inside --------------------------------------------

def test_the_grid_of_float32_values_is_float32_and_of_float64_ones_float64():
    x = torch.tensor(DEFAULT_INPUT, dtype=torch.float64) + 1e-6
    assert grid(x.exp()) == torch.float64
    assert grid(x.float().exp().double()) == torch.float32
    assert grid(torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64)) == torch.float64  # integers tell nothing


def test_a_float32_forward_with_a_right_backward_passes():
    # Before: 'PROBLEM: ... x[2] (= -3) -> out[2]: expected 0.0465661, got 0.0497871' (the
    # difference of float32 roundings over 1e-6), and four entries called kinks.
    result = run("Float32Exp")
    assert result.ok, str(result)
    assert all(c.ok and c.kinks == 0 for c in result.first)
    assert result.gradcheck.ok is True
    assert result.gradcheck.unreliable_points == len(DEFAULT_INPUT)
    assert "the forward rounds to float32 inside" in next(iter(result.gradcheck.unreliable_reasons))
    # what the comparison now holds backward to: exp(x), within gradcheck's tolerance
    x = torch.tensor(DEFAULT_INPUT, dtype=torch.float64)
    check = result.first[0]
    assert torch.allclose(check.expected.diagonal(), x.exp(), rtol=1e-3, atol=1e-5)


def test_a_float32_forward_and_backward_pass_at_first_order():
    result = run("Float32TanhFloat32Backward")
    assert result.ok, str(result)
    assert result.gradcheck.unreliable_points == 13  # tanh(0) = 0 exactly: its difference is right


def test_a_float32_forward_with_a_float64_backward_passes_at_second_order():
    result = run("Float32Exp", order=2)
    assert result.ok, str(result)
    assert result.gradgradcheck.ok is True and all(c.ok for c in result.second)


def test_a_float32_forward_with_a_scaled_backward_still_fails_with_its_factor():
    result = run("Float32SinScaled")
    assert not result.ok
    assert result.first[0].count == len(DEFAULT_INPUT)
    assert "1.01 times the true one" in str(result)
    x = torch.tensor(DEFAULT_INPUT, dtype=torch.float64)
    assert torch.allclose(result.first[0].expected.diagonal(), x.cos(), rtol=1e-3, atol=1e-5)


def test_a_float32_forward_with_one_wrong_entry_shows_that_entry_alone():
    # Before: 13 entries 'wrong', the first shown x[0] (= -6) 'expected 0, got 2.46e-05'.
    result = run("Float32TanhOneWrong")
    assert not result.ok
    (check,) = result.first
    assert check.count == 1
    (shown,) = check.mismatches
    assert shown.element == "x[8]" and shown.at == 0.5
    assert abs(shown.expected - (1 - torch.tanh(torch.tensor(0.5)).item() ** 2)) < 1e-4


def test_float32_rounding_is_no_kink_for_one_sided_differences():
    # Before: the gap between left and right quotients of a float32 exp (its rounding over
    # 1e-6) did not shrink with the step, so x = -6, -4, -1.5 and 0 were 'at a kink'.
    fn_class = fixture("Float32Exp")
    tensors = {"x": torch.tensor(DEFAULT_INPUT, dtype=torch.float64)}

    def fn(values):
        return fn_class.apply(values["x"])

    got, expected = analytical(fn, tensors), numerical(fn, tensors)
    assert bool((got["x"] - expected["x"]).abs().max() > 1e-3)  # the short step is noise here
    masks = one_sided_kinks(fn, tensors, got, expected)
    assert not bool(masks["x"].any())


# --- how backward treats grad_output ------------------------------------------------------

def test_writing_into_grad_output_corrupts_another_tensors_gradient_in_plain_torch():
    # Why it is a PROBLEM although gradcheck passes: the add hands one tensor to both inputs.
    square = fixture("SquareInplaceGrad")
    x = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64, requires_grad=True)
    c = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    h = b * 1  # made first, so autograd runs the Function's backward before h's
    ((square.apply(x) + h) * c).sum().backward()
    assert torch.allclose(x.grad, 2 * x.detach() * c, rtol=0, atol=1e-12)
    assert not torch.allclose(b.grad, c, rtol=0, atol=1e-12)  # b's true gradient is c
    assert torch.allclose(b.grad, 2 * x.detach() * c, rtol=0, atol=1e-12)  # it got x's
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        square.apply(x.detach().clone().requires_grad_()).sum().backward()  # an expanded grad_output


def test_a_backward_writing_into_grad_output_fails():
    # Before: 'OK: ... agrees with gradcheck' (gradcheck's grad_output is fresh and held by nothing).
    result = run("SquareInplaceGrad")
    assert not result.ok
    assert all(c.ok for c in result.first)  # the values are right: the fault is the write
    assert str(result).splitlines()[-1].startswith(
        "PROBLEM: contract error: SquareInplaceGrad.backward modifies grad_output in place")


def test_a_backward_that_views_a_transposed_grad_output_fails():
    # Before: OK; in use, (out.t() * w).sum().backward() raises in .view(-1).
    result = run("DoubleViaView", var=["x=randn(3, 4)"])
    assert not result.ok
    (finding,) = [f for f in result.audit.findings if f.kind == "error"]
    assert finding.text.startswith("DoubleViaView.backward raises for a non-contiguous (transposed) grad_output")
    assert "RuntimeError: view size is not compatible" in finding.text


def test_a_backward_reading_grad_output_memory_as_contiguous_fails_on_a_strided_one():
    result = run("DoubleReadingMemory")  # 1-D: the strided layout (a column of a stacked pair)
    assert not result.ok
    (finding,) = [f for f in result.audit.findings if f.kind == "error"]
    assert finding.text.startswith("DoubleReadingMemory.backward returns another gradient for x when grad_output "
                                   "is non-contiguous (strided)")


def test_backwards_right_in_every_layout_pass():
    for name, var in (("TransposeScale", ["x=randn(3, 4)"]), ("Identity", ["x=randn(3, 4)"]), ("Identity", [])):
        result = run(name, var=var)
        assert result.ok, str(result)
        assert not [f for f in result.audit.findings if f.kind == "error"]


# --- past JACOBIAN_MAX --------------------------------------------------------------------

def test_one_wrong_element_past_the_jacobian_limit_is_found():
    # Before: 'OK: ... agrees with gradcheck' (fast mode: one projection, the 5 % at one
    # element of 1,600 is inside its tolerance).
    result = run("SinOneElementOff", var=["x=randn(40, 40)"], seed=0)
    assert not result.ok
    (check,) = result.first
    assert check.count == 1
    (shown,) = check.mismatches
    assert shown.element == "x[0, 7]" and shown.output == "sum(w*out)"
    weights = torch.rand(1600, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.5
    assert abs(shown.expected - weights[7].item() * torch.cos(torch.tensor(shown.at)).item()) < 1e-6
    assert abs(shown.got - 1.05 * shown.expected) < 1e-6


def test_a_right_backward_past_the_jacobian_limit_passes_element_by_element():
    result = run("Sin", var=["x=randn(40, 40)"])
    assert result.ok, str(result)
    assert result.first[0].expected.shape == (1, 1600) and result.first[0].count == 0


def test_past_the_projected_limit_only_gradcheck_runs_and_says_so():
    from gradcli.verify.function.projected import PROJECTED_MAX

    result = run("Sin", var=[f"x=randn({PROJECTED_MAX + 1})"])
    assert result.ok and not result.first
    assert f"only gradcheck (fast mode) runs past {PROJECTED_MAX:,}" in " ".join(result.notes)


def test_grad_output_is_probed_beside_a_non_differentiable_output():
    # The mask's grad_output is zeros, as torch passes it (None made backward raise, and the
    # probe was skipped: OK).
    result = run("ReluWithMaskInplace")
    assert not result.ok
    assert any(f.kind == "error" and "modifies grad_output in place" in f.text for f in result.audit.findings)
