"""check-function's outputs and in-place Functions (issue 16, points 3 and 4): every
differentiable floating output is checked, the others skipped and listed, `--output N` picks
one; the verdict agrees with torch.autograd.gradcheck run on the same Function by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from gradcli import check_function
from gradcli.errors import UsageError
from paths import FIXTURES, ROOT

TYPED = FIXTURES / "typed_functions.py"
# The README's typed Functions live only there: the right SoftmaxArgmax, the wrong in-place sigmoid.
EXAMPLE = ROOT / "examples" / "typed_functions.py"
X = [[1.0, 2.0, 0.5], [0.1, -1.0, 0.3]]


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIXTURES = _module(TYPED, "typed_functions_for_outputs")
EXAMPLES = _module(EXAMPLE, "typed_examples_for_outputs")


def torch_gradcheck(fn, x) -> bool:
    """What a user gets from torch's own gradcheck, written by hand as its docs say."""
    leaf = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    return torch.autograd.gradcheck(fn, (leaf,), raise_exception=False)


@pytest.mark.parametrize("function, ok", [(EXAMPLES.SoftmaxArgmax, True), (FIXTURES.SoftmaxArgmaxWrong, False)],
                         ids=["SoftmaxArgmax", "SoftmaxArgmaxWrong"])
def test_non_differentiable_integer_and_non_tensor_outputs_are_skipped(function, ok):
    result = check_function(function, [f"x={X}"])
    assert result.ok is ok, str(result)
    assert [(o.index, o.type, o.shape, o.status) for o in result.outputs] == [
        (0, "float64 tensor", [2, 3], "checked"),
        (1, "int64 tensor", [2], "integer"),
        (2, "int", None, "not a tensor"),
        (3, "float64 tensor", [2], "non-differentiable"),  # ctx.mark_non_differentiable
    ]
    # torch's gradcheck cannot take the int output; on the tensor outputs it skips the
    # non-differentiable ones, and its verdict is gradcheck's here.
    assert torch_gradcheck(lambda x: tuple(o for o in function.apply(x) if isinstance(o, torch.Tensor)), X) is ok
    assert result.gradcheck.ok is ok
    # Only output 0's 6 elements are in the Jacobian: 6 outputs x 6 inputs.
    assert tuple(result.first[0].got.shape) == (6, 6)


@pytest.mark.parametrize("name, ok", [("TanhWithStats", True), ("TanhWithStatsSquareWrong", False)])
def test_every_differentiable_output_is_checked_and_an_ndarray_skipped(name, ok):
    function = getattr(FIXTURES, name)
    result = check_function(function, ["x=[0.5, -1.0, 2.0]"])
    assert result.ok is ok
    assert [o.status for o in result.outputs] == ["checked", "checked", "not a tensor"]
    assert result.outputs[2].type == "ndarray"
    assert torch_gradcheck(lambda x: function.apply(x)[:2], [0.5, -1.0, 2.0]) is ok
    assert tuple(result.first[0].got.shape) == (6, 3)  # both outputs, 3 elements each
    if not ok:  # the tanh output is right, the x*x one wrong: every mismatch is in outputs 3 to 5
        assert {m.output for m in result.first[0].mismatches} == {"out[3]", "out[4]", "out[5]"}


def test_output_picks_one():
    wrong = FIXTURES.TanhWithStatsSquareWrong
    first = check_function(wrong, ["x=[0.5, -1.0, 2.0]"], output=0)
    assert first.ok  # the tanh output alone is right
    assert [o.status for o in first.outputs] == ["checked", "not chosen", "not a tensor"]
    second = check_function(wrong, ["x=[0.5, -1.0, 2.0]"], output=1)
    assert not second.ok
    assert any("0.5 times the true one" in c.summary for c in second.causes), second.causes
    assert check_function(wrong, ["x=[0.5, -1.0, 2.0]"], output=-2).ok is False  # counted from the end


@pytest.mark.parametrize("output, message", [
    (5, "--output 5: forward returns 4 outputs"),
    (1, "--output 1: output 1: int64 tensor of shape 2, skipped: integer and bool tensors have no gradient"),
    (3, "--output 3: output 3: float64 tensor of shape 2, skipped: ctx.mark_non_differentiable"),
])
def test_output_that_cannot_be_checked_is_refused(output, message):
    with pytest.raises(UsageError) as info:
        check_function(EXAMPLES.SoftmaxArgmax, [f"x={X}"], output=output)
    assert message in info.value.render()


def test_output_past_a_single_output_is_refused_with_a_hint_that_reads(cli):
    # One output: "give 0 to 0" said nothing; the hint names the one there is.
    result = cli("check-function", f"{ROOT / 'examples' / 'swish.py'}:Swish", "--output", "1")
    assert result.exit_code == 2
    assert result.stderr == ("error: --output 1: forward returns 1 output\n"
                             "hint: leave --output out: 0 is the only one\n")


def test_outputs_in_text_and_json(cli):
    target = f"{EXAMPLE}:SoftmaxArgmax"
    text = cli("check-function", target, "--var", f"x={X}")
    assert text.exit_code == 0, text.stderr
    assert "output 2: int, skipped: not a tensor" in text.stdout
    assert "output 3: float64 tensor of shape 2, skipped: ctx.mark_non_differentiable" in text.stdout
    document = json.loads(cli("check-function", target, "--var", f"x={X}", "--json").stdout)
    assert [o["checked"] for o in document["outputs"]] == [True, False, False, False]
    assert document["outputs"][3] == {"index": 3, "type": "float64 tensor", "shape": [2], "checked": False,
                                      "status": "non-differentiable"}
    picked = cli("check-function", f"{TYPED}:TanhWithStatsSquareWrong", "--output", "1")
    assert picked.exit_code == 1 and "output 0: float64 tensor of shape 14, skipped: --output picks another" in picked.stdout
    assert cli("check-function", target, "--output", "7").exit_code == 2


def test_a_forward_without_a_differentiable_output_is_refused():
    class OnlyIndex(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.argmax(), 3

        @staticmethod
        def backward(ctx, grad, other):
            return None

    from gradcli.errors import UserCodeError

    with pytest.raises(UserCodeError, match="forward returned no differentiable floating tensor"):
        check_function(OnlyIndex)


@pytest.mark.parametrize("function, ok", [(FIXTURES.SigmoidInplace, True), (EXAMPLES.SigmoidInplace, False)],
                         ids=["right", "wrong (examples/typed_functions.py)"])
def test_an_in_place_function_runs_on_a_clone_and_is_verdicted(function, ok):
    result = check_function(function, ["x=[0.5, -1.0, 2.0]"])
    assert result.ok is ok, str(result)
    assert any("forward modifies x in place (ctx.mark_dirty)" in n for n in result.notes)
    assert result.inputs.values[0].tolist() == [0.5, -1.0, 2.0]  # the leaf itself was never modified
    assert torch_gradcheck(lambda x: function.apply(x.clone()), [0.5, -1.0, 2.0]) is ok  # as users do by hand
    expected = torch.sigmoid(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
    expected = expected * (1 - expected)  # the true derivative, on the diagonal
    assert torch.allclose(result.first[0].expected.diagonal(), expected, atol=1e-8)


def test_an_in_place_function_passes_at_second_order():
    result = check_function(FIXTURES.SigmoidInplace, ["x=[0.5, -1.0, 2.0]"], order=2)
    assert result.ok, str(result)


def test_the_readme_excerpt_is_the_real_output(cli, monkeypatch):
    # docs/commands/check-function.md quotes this run in full; the contract line (added with the audit) was missing.
    monkeypatch.chdir(ROOT)
    readme = (ROOT / "docs" / "commands" / "check-function.md").read_text(encoding="utf-8")
    start = readme.index("```text\ncheck-function examples/typed_functions.py:SoftmaxArgmax ")
    excerpt = readme[start + len("```text\n"):readme.index("```", start + 3)]
    result = cli("check-function", "examples/typed_functions.py:SoftmaxArgmax", "--var",
                 "x=[[1.0, 2.0, 0.5], [0.1, -1.0, 0.3]]")
    assert result.exit_code == 0
    assert result.stdout == excerpt
