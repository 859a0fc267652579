"""check-function's contract audit: each finding from a Function that has it, and its right twin without."""

from __future__ import annotations

from pathlib import Path

from gradcli import check_function
from paths import FIXTURES

TRANSFORMS = FIXTURES / "transform_functions.py"


def run(name: str, file: Path = TRANSFORMS, **options):
    return check_function(f"{file}:{name}", **options)


def said(result) -> str:
    """`str(result)` with its words joined again where a long line wrapped at 100 columns, as
    the command's text wraps on a pipe."""
    return " ".join(str(result).split())


def findings(result) -> list[tuple[str, str]]:
    return [(f.kind, f.text) for f in result.audit.findings]


def test_a_right_function_has_a_clean_audit_and_its_summary():
    result = run("MulNeedsInputGrad")
    assert result.ok and result.audit.ok and findings(result) == []
    assert result.audit.gradients == 2 and result.audit.inputs == 2
    assert "contract: backward returns 2 gradients for 2 inputs; saved for backward: x (input), w (input)" in said(result)


def test_too_few_gradients_is_an_error_and_nothing_else_runs():
    result = run("TooFewGradients", FIXTURES / "functions.py")
    assert not result.ok and result.gradcheck.ok is None and not result.first
    assert findings(result) == [("error", "TooFewGradients.backward returns 1 gradient but forward takes 2 inputs "
                                          "(x, y): return one per input, in order, None for those without a gradient")]


def test_a_gradient_for_a_number_is_the_error_torch_raises_in_words():
    result = run("ScaleGradForNumber")
    assert not result.ok
    assert findings(result) == [("error", "ScaleGradForNumber.backward returns a gradient for k, which is not a "
                                          "tensor (float): torch refuses it; return None for k")]
    right = run("ScaleNoneForNumber")
    assert right.ok and findings(right) == [] and right.audit.gradients == 2


def test_a_gradient_of_the_wrong_shape_is_an_error():
    result = run("SquareWrongShape")
    assert not result.ok
    assert findings(result) == [("error", "SquareWrongShape.backward returns a gradient of shape [1] for x, whose "
                                          "shape is [14]: torch refuses it")]


def test_ignoring_needs_input_grad_is_a_note_per_input_not_a_failure():
    result = run("MulIgnoresNeedsInputGrad")
    assert result.ok, str(result)
    assert findings(result) == [
        ("note", "MulIgnoresNeedsInputGrad.backward computes a gradient for x although ctx.needs_input_grad[0] is "
                 "False (torch discards it): compute it only under `if ctx.needs_input_grad[0]:`"),
        ("note", "MulIgnoresNeedsInputGrad.backward computes a gradient for w although ctx.needs_input_grad[1] is "
                 "False (torch discards it): compute it only under `if ctx.needs_input_grad[1]:`"),
    ]


def test_saved_tensors_are_classified_as_input_output_or_intermediate():
    result = run("SwishSavesEverything")
    assert result.ok and findings(result) == []
    assert [(s.role, s.name, s.shape) for s in result.audit.saved] == [
        ("input", "x", (14,)), ("output", "out", (14,)), ("intermediate", "", (14,))]
    assert "saved for backward: x (input), out (output), an intermediate [14]" in said(result)


def test_tensors_kept_on_ctx_are_each_named_with_what_they_are():
    result = run("SwishTensorsOnCtx")
    assert result.ok  # the values are right: these are notes
    assert result.audit.saved == []
    texts = [text for kind, text in findings(result) if kind == "note"]
    assert len(texts) == 3
    assert texts[0].startswith("ctx.out holds a tensor, forward's output out: a reference cycle")
    assert texts[1].startswith("ctx.s holds a tensor, an intermediate [14]: torch does not check it")
    assert texts[2].startswith("ctx.x holds a tensor, input x: an in-place change of it after forward goes unnoticed")
    assert all(t.endswith("pass it to ctx.save_for_backward instead") for t in texts)


def test_once_differentiable_is_by_design_at_order_2_and_not_mentioned_at_order_1():
    result = run("SwishOnceDifferentiable", order=2)
    assert result.ok, str(result)
    assert findings(result) == [("by design", "SwishOnceDifferentiable.backward is @once_differentiable: not twice "
                                              "differentiable, by design, so the second-order checks do not run")]
    assert result.gradgradcheck.ok is None and result.second == []
    assert "gradgradcheck: not run (backward is @once_differentiable: not twice differentiable, by design)" in said(result)
    assert findings(run("SwishOnceDifferentiable")) == []


def test_a_twice_differentiable_function_runs_its_second_order_checks():
    result = run("MulNeedsInputGrad", order=2)
    assert result.ok and result.gradgradcheck.ok is True and result.second and findings(result) == []


def test_an_in_place_function_is_audited_on_a_clone_of_its_leaf():
    from gradcli.verify.function.audit import audit_contract
    from gradcli.verify.function.inputs import make_inputs
    from gradcli.verify.function.userfile import load_function

    cls = load_function(f"{TRANSFORMS}:ReluInPlace")
    audit = audit_contract(cls, make_inputs(cls, ["x=[-1.0, 2.0]"], 0), 1)
    assert audit.ok and audit.gradients == 1 and audit.findings == []
    assert [(s.role, s.name) for s in audit.saved] == [("input", "x")]  # marked dirty: the input is the output
