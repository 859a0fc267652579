"""check-function beyond backward: the jvp (forward mode) and torch.func (grad, jacrev, jacfwd, vmap)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gradcli import check_function
from gradcli.verify.function.forward_mode import jvp_jacobian
from gradcli.verify.function.userfile import DEFAULT_INPUT
from paths import FIXTURES

TRANSFORMS = FIXTURES / "transform_functions.py"


def run(name: str, **options):
    return check_function(f"{TRANSFORMS}:{name}", **options)


def said(result) -> str:
    """`str(result)` with its words joined again where a long line wrapped at 100 columns, as
    the command's text wraps on a pipe."""
    return " ".join(str(result).split())


def swish_derivative(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return s + x * s * (1 - s)


# Forward mode ---------------------------------------------------------------------------

def test_a_right_jvp_agrees_with_backward_and_finite_differences():
    result = run("SwishJvp")
    assert result.ok, str(result)
    fm = result.forward_mode
    assert fm.gradcheck.ok is True and fm.error is None
    assert [c.name for c in fm.against_differences] == ["x"] and fm.against_differences[0].ok
    assert fm.against_backward[0].ok and fm.backward_right == {"x": True}
    assert "forward mode [x]: jvp agrees with backward and with finite differences" in said(result)


def test_jvp_jacobian_equals_the_diagonal_of_the_derivative():
    import importlib.util

    spec = importlib.util.spec_from_file_location("transform_functions_jvp", TRANSFORMS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64)
    blocks = jvp_jacobian(lambda v: module.SwishJvp.apply(v["x"]), {"x": x})
    torch.testing.assert_close(blocks["x"], torch.diag(swish_derivative(x)), rtol=0, atol=1e-15)


def test_a_right_jvp_beside_a_wrong_backward_says_which_side_finite_differences_support():
    result = run("SwishWrongBackward")
    assert not result.ok
    fm = result.forward_mode
    assert fm.gradcheck.ok is True  # torch's forward-mode check alone: the jvp is right
    assert fm.against_differences[0].ok and not fm.against_backward[0].ok
    # Every diagonal entry but x = 0, where sigmoid(0) = 1/2 is also the true derivative.
    assert fm.against_backward[0].count == 13 and fm.backward_right == {"x": False}
    text = said(result)
    assert "jvp and backward disagree at 13 of 196 entries: the jvp agrees with finite differences, backward does not" in text
    # x[0] = -6: backward gives sigmoid(x), the jvp the true derivative
    x = torch.tensor(DEFAULT_INPUT[0], dtype=torch.float64)
    mismatch = fm.against_backward[0].mismatches[0]
    assert mismatch.element == "x[0]"
    assert mismatch.expected == pytest.approx(float(torch.sigmoid(x)), abs=1e-12)
    assert mismatch.got == pytest.approx(float(swish_derivative(x)), abs=1e-12)


def test_a_wrong_jvp_beside_a_right_backward_is_caught_and_blamed_on_the_jvp():
    result = run("SwishWrongJvp")
    assert not result.ok and all(c.ok for c in result.first) and result.gradcheck.ok
    fm = result.forward_mode
    assert fm.gradcheck.ok is False and "forward mode" in fm.gradcheck.message
    assert not fm.against_differences[0].ok and fm.backward_right == {"x": True}
    assert "backward agrees with finite differences, the jvp does not" in said(result)
    assert result.verdict().startswith("PROBLEM: forward mode (jvp) gradcheck: FAILED")


def test_a_jvp_that_raises_is_shown_with_its_line_and_the_missing_save_for_forward():
    result = run("JvpWithoutSaveForForward")
    assert not result.ok
    error = result.forward_mode.error
    assert error.startswith("ValueError: not enough values to unpack")
    assert "(at transform_functions.py line" in error
    assert "fills only from ctx.save_for_forward, and nothing calls it" in error


def test_two_inputs_and_two_outputs_line_up_in_forward_mode_and_every_transform():
    result = run("SinTimesWeightAndCos")
    assert result.ok, str(result)
    fm = result.forward_mode
    assert [c.name for c in fm.against_backward] == ["x", "w"]
    assert tuple(fm.against_backward[0].got.shape) == (28, 14)  # 14 + 14 output elements, 14 input elements
    assert all(c.ok for c in fm.against_backward + fm.against_differences)
    assert all(r.supported and r.agrees for r in result.transforms.runs)


def test_a_function_without_jvp_has_no_forward_mode_section():
    result = run("CubeVmapRule")
    assert result.forward_mode is None
    assert result.as_dict()["forward_mode"] is None


# torch.func and vmap --------------------------------------------------------------------

def supported(result) -> dict[str, bool]:
    return {r.name: r.supported for r in result.transforms.runs}


def test_every_transform_works_and_agrees_with_a_setup_context_a_jvp_and_a_vmap_rule():
    result = run("SwishJvp")
    assert supported(result) == {"grad": True, "jacrev": True, "jacfwd": True, "vmap": True}
    assert all(r.agrees for r in result.transforms.runs)
    assert max(r.max_abs_err for r in result.transforms.runs) < 1e-12
    assert result.transforms.batched.ok is True
    assert "torch.func: supports grad, jacrev, jacfwd, vmap" in said(result)


def test_without_a_jvp_jacfwd_is_unsupported_and_says_why_without_failing():
    result = run("CubeVmapRule")
    assert result.ok, str(result)
    assert supported(result) == {"grad": True, "jacrev": True, "jacfwd": False, "vmap": True}
    jacfwd = result.transforms.runs[2]
    assert jacfwd.why == "no jvp staticmethod (forward mode needs one)"
    assert "You must implement the jvp function" in jacfwd.error  # torch's own text, kept in the JSON


def test_a_declared_vmap_rule_without_setup_context_is_a_problem_naming_setup_context():
    result = run("CubeVmapRuleWithoutSetup")
    assert not result.ok
    assert supported(result) == {"grad": False, "jacrev": False, "jacfwd": False, "vmap": False}
    vmap = result.transforms.runs[3]
    assert vmap.required and not vmap.ok
    assert "must override the setup_context staticmethod" in vmap.error
    assert result.verdict() == ("PROBLEM: torch.func vmap: not supported although the Function declares it: "
                                "forward takes ctx: torch.func needs forward(...) without ctx and a setup_context "
                                "staticmethod")


def test_an_old_style_jvp_works_in_forward_mode_and_torch_func_unsupported_is_not_a_fault():
    result = run("SquareJvpOldStyle")
    assert result.ok, str(result)
    assert result.forward_mode.ok and not any(supported(result).values())
    assert all(not r.required for r in result.transforms.runs)


def test_a_hand_written_vmap_rule_right_and_wrong():
    right = run("CubeVmap")
    assert right.ok, str(right)
    assert supported(right)["vmap"] and right.transforms.runs[3].agrees
    wrong = run("CubeWrongVmap")
    assert not wrong.ok
    vmap = wrong.transforms.runs[3]
    assert vmap.supported and vmap.agrees is False
    # The wrong rule adds the batch mean; the batch is x + (0, 0.25, -0.5): every row is off by x - 1/12.
    x = torch.tensor(DEFAULT_INPUT, dtype=torch.float64)
    batch = torch.stack([x, x + 0.25, x - 0.5])
    assert vmap.max_abs_err == pytest.approx(float(batch.mean(0).abs().max()), abs=1e-12)
    assert "torch.func vmap: differs from forward run on each batch element" in said(wrong)


def test_a_plain_old_style_function_has_no_torch_func_section():
    result = check_function(f"{FIXTURES / 'functions.py'}:Swish")
    assert result.transforms is None and result.forward_mode is None
    assert "torch.func" not in said(result)


_VMAP_ONLY = '''
import torch


class ScaleVmap(torch.autograd.Function):
    @staticmethod
    def forward(x, k: float = 2.0):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k, None

    @staticmethod
    def vmap(info, in_dims, x, k):
        return ScaleVmap.apply(x, k), in_dims[0]
'''


def test_trying_jacfwd_leaves_stderr_empty(tmp_path):
    # jacfwd's first forward-mode call makes torch load decompositions that warn about
    # torch.jit.script on stderr; only a fresh process shows it (a test run loads them once).
    (tmp_path / "scale_vmap_ops.py").write_text(_VMAP_ONLY)
    done = subprocess.run([sys.executable, "-m", "gradcli", "check-function", f"{tmp_path / 'scale_vmap_ops.py'}:ScaleVmap"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "torch.func jacfwd: not supported: no jvp staticmethod (forward mode needs one)" in done.stdout
    assert done.stderr == ""
