"""check-function's verdict on real Function shapes (issue 16, points 5-7 and 9's default input).

Kinks reported apart and not as wrong, comparisons that tested nothing said so, second order
of a normaliser taken with random output weights, and causes named only on evidence. The
Functions are tests/fixtures/verdict_functions.py; expected values are hand-written
derivatives or torch's own (torch.autograd.functional.hessian) with explicit tolerances.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gradcli import check_function
from gradcli.verify.finite_differences.jacobian import InputCheck, output_weights
from gradcli.verify.function.kinks import one_sided_kinks
from gradcli.verify.function.userfile import DEFAULT_INPUT
from paths import FIXTURES

FUNCTIONS = f"{FIXTURES / 'verdict_functions.py'}"


def run(name: str, **options):
    return check_function(f"{FUNCTIONS}:{name}", **options)


def fixture(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location("verdict_fixtures", FUNCTIONS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


# --- point 9: the default input covers the regions where functions change -------------------

def test_default_input_reaches_zero_the_usual_breakpoints_and_beyond():
    values = set(DEFAULT_INPUT)
    assert {0.0, 1.0, -1.0, 3.0, -3.0} <= values  # relu/hardtanh/abs and hard-sigmoid/hard-swish kinks
    assert min(values) < -3 and max(values) > 3  # the flat pieces of hard-sigmoid
    assert any(-3 < v < -1 for v in values) and any(1 < v < 3 for v in values)  # hardtanh's flat beyond +-1
    # sparsemax of the default keeps more than one element (a one-hot output tests nothing)
    out = fixture("Sparsemax").apply(torch.tensor(DEFAULT_INPUT, dtype=torch.float64))
    assert int((out > 0).sum()) == 2


def test_help_describes_the_default_input_truly(cli):
    result = cli("check-function", "--help")
    text = " ".join(result.stdout.split())
    assert "14 values in [-6, 4] (0, ±1, ±3 and beyond them)" in text
    assert "including 0 and ±1" not in text


# --- point 5: kinks ---------------------------------------------------------------------------

def test_hard_swish_taking_one_sided_derivatives_at_its_kinks_passes():
    result = run("HardSwishOneSided")
    assert result.ok, str(result)
    (first,) = result.first
    assert first.count == 0 and first.kinks == 2
    shown = [(m.element, m.at, m.got, m.expected) for m in first.kinks_shown]
    # backward's middle slope (2x + 3)/6 at the kinks; the central difference is the mean of the sides
    assert shown == [("x[2]", -3.0, -0.5, pytest.approx(-0.25, abs=1e-6)),
                     ("x[11]", 3.0, 1.5, pytest.approx(1.25, abs=1e-6))]
    # torch's gradcheck fails there; it failed only at those entries, so it counts as passed
    assert result.gradcheck.ok is True and result.gradcheck.unreliable_points == 2
    assert "gradcheck: it failed only at 2 Jacobian entries at a kink, reported apart" in result.notes
    assert result.verdict().startswith("OK: ")


def test_hard_swish_kinks_from_the_reference_at_both_orders():
    result = run("HardSwishOneSided", ref="hardswish(x)", order=2)
    assert result.ok, str(result)
    assert "second derivatives are those of sum(w * out), w drawn from [0.5, 1.5) with seed 0" in result.notes
    for checks in (result.first, result.second, result.ref_first, result.ref_second):
        (check,) = checks
        assert check.kinks == 2 and check.count == 0
        assert [m.element for m in check.kinks_shown] == ["x[2]", "x[11]"]
    assert result.gradgradcheck.ok is True


def test_hard_swish_wrong_away_from_the_kinks_still_fails():
    for ref in (None, "hardswish(x)"):
        result = run("HardSwishWrongMiddle", ref=ref)
        assert not result.ok
        (first,) = result.first
        assert first.kinks == 2
        # (x + 3)/6 instead of (2x + 3)/6 at every middle point but 0 is wrong (at x = 0 both are 0.5)
        middle = [v for v in DEFAULT_INPUT if -3 < v < 3 and v != 0]
        assert first.count == len(middle)
        m = first.mismatches[0]
        assert (m.element, m.at, m.expected, m.got) == ("x[3]", -1.5, pytest.approx(0.0, abs=1e-6), 0.25)
        assert result.gradcheck.ok is False
        # f(-1.5 + h) == f(-1.5 - h) at the vertex of x(x + 3)/6: that is no flat forward
        assert not any("does not change over the step" in note for note in result.notes), result.notes


def test_a_value_outside_both_sides_at_a_kink_is_wrong():
    result = run("HardSwishWrongAtKink")
    assert not result.ok
    (first,) = result.first
    assert first.count == 1 and first.kinks == 1  # -3 apart (right), 3 wrong: 3 is not in [1, 1.5]
    (m,) = first.mismatches
    assert (m.element, m.got) == ("x[11]", 3.0)
    assert result.causes == []  # one wrong point is no "branch for x > 0"
    assert result.verdict() == ("PROBLEM: x[11] (= 3) -> out[11] is at a kink, with one-sided derivatives 1.5 (left) "
                                "and 1 (right): backward gives 3, outside both")


def test_one_sided_differences_do_not_take_curvature_for_a_kink():
    # sin(1000 x) at a zero of its derivative: the one-sided quotients differ by ~1 (the step
    # times f''), beyond the tolerance, but the gap shrinks with the step: no kink.
    x = torch.tensor([torch.pi / 2000], dtype=torch.float64)

    def fn(values):
        return torch.sin(1000 * values["x"])

    got = torch.tensor([[0.3]], dtype=torch.float64)  # between the two sides, and wrong
    expected = torch.tensor([[1000 * torch.cos(1000 * x).item()]], dtype=torch.float64)
    assert not one_sided_kinks(fn, {"x": x}, {"x": got}, {"x": expected})["x"].any()

    # abs at 0: sides -1 and 1, the gap stays; a backward giving 0 or 1 is at a kink, 2 is not
    zero = torch.zeros(1, dtype=torch.float64)

    def absolute(values):
        return values["x"].abs()

    for value, kink in ((0.0, False), (1.0, True), (-1.0, True), (0.5, True), (2.0, False)):
        got = torch.tensor([[value]], dtype=torch.float64)
        mask = one_sided_kinks(absolute, {"x": zero}, {"x": got}, {"x": torch.zeros(1, 1, dtype=torch.float64)})
        assert bool(mask["x"][0, 0]) is kink, value  # 0 agrees with the central difference: not looked at


# --- point 6: silent non-tests ------------------------------------------------------------------

def test_hard_sigmoid_flat_regions_are_exercised():
    result = run("HardSigmoid")
    assert result.ok, str(result)
    (first,) = result.first
    flat = [j for j, v in enumerate(DEFAULT_INPUT) if abs(v) > 3]
    assert all(first.got[j, j] == 0 for j in flat) and len(flat) == 4
    wrong = run("HardSigmoidNoFlat")  # forgets the flat regions: the old inputs in (-3, 3) never saw it
    assert not wrong.ok
    assert sorted(m.at for m in wrong.first[0].mismatches) == [-6.0, -4.0, 3.5, 4.0]
    assert all(m.expected == pytest.approx(0, abs=1e-9) and m.got == pytest.approx(1 / 6) for m in wrong.first[0].mismatches)
    assert run("HardSigmoidNoFlat", var=["x=[-2.5, -1.0, 0.5, 2.5]"]).ok  # what the old default showed


def test_a_piecewise_linear_second_order_tested_nothing_and_says_so(cli):
    result = run("HardSigmoid", order=2)
    assert result.ok  # the first order was tested: exit 0 with the warning in the verdict
    assert result.second[0].tested_nothing and not result.first[0].tested_nothing
    assert [item.as_dict() for item in result.untested] == [{"input": "x", "order": 2, "against": "finite differences"}]
    assert result.verdict().startswith("OK, but tested nothing for x at order 2 (every compared entry is 0): ")
    out = cli("check-function", f"{FUNCTIONS}:HardSigmoid", "--order", "2")
    assert out.exit_code == 0
    text = " ".join(out.stdout.split())  # rich wraps at the width
    assert "[x]: tested nothing: every compared entry is 0; at a kink: 2 entries, not compared" in text
    doc = json.loads(cli("check-function", f"{FUNCTIONS}:HardSigmoid", "--order", "2", "--json").stdout)
    assert doc["ok"] is True and doc["second_order"][0]["tested_nothing"] is True
    assert doc["tested_nothing"] == [{"input": "x", "order": 2, "against": "finite differences"}]
    assert doc["first_order"][0]["kinks"] == 2 and doc["first_order"][0]["tested_nothing"] is False


def test_sparsemax_on_the_default_input_is_tested_against_its_jacobian():
    result = run("Sparsemax")
    assert result.ok, str(result)
    (first,) = result.first
    assert not first.tested_nothing
    x = torch.tensor(DEFAULT_INPUT, dtype=torch.float64)
    s = (fixture("Sparsemax").apply(x) > 0).to(torch.float64)  # the support: 4 and 3.5
    expected = torch.diag(s) - torch.outer(s, s) / s.sum()  # Martins & Astudillo (2016), eq. 12
    assert torch.allclose(first.got, expected, atol=1e-12)
    assert int((first.got != 0).sum()) == 4


def test_a_one_hot_sparsemax_tested_nothing_exits_1(cli):
    result = run("Sparsemax", var=["x=[5.0, 0.0, -1.0]"])
    assert not result.ok
    assert result.first[0].tested_nothing and result.first[0].count == 0
    assert result.verdict() == ("NOT TESTED: every first derivative compared is 0 at these inputs (9 entries), so a "
                                "backward returning zeros would pass too: give --var inputs where the output moves")
    out = cli("check-function", f"{FUNCTIONS}:Sparsemax", "--var", "x=[5.0, 0.0, -1.0]")
    assert out.exit_code == 1
    assert out.stdout.rstrip().endswith("give --var inputs where the output moves")
    doc = json.loads(cli("check-function", f"{FUNCTIONS}:Sparsemax", "--var", "x=[5.0, 0.0, -1.0]", "--json").stdout)
    assert doc["ok"] is False and doc["verdict"].startswith("NOT TESTED: ")
    assert doc["tested_nothing"] == [{"input": "x", "order": 1, "against": "finite differences"}]


def test_second_order_of_a_normaliser_uses_random_output_weights():
    result = run("Softmax", var=["x=[0.5, -1.0, 2.0]"], order=2, seed=3)
    assert result.ok, str(result)
    (second,) = result.second
    assert not second.tested_nothing  # the gradient of sum(softmax) is 0 everywhere; of sum(w * softmax) not
    assert ("sum(out) is constant at these inputs (its gradient is 0, as for a normalising output), so second "
            "derivatives are those of sum(w * out), w drawn from [0.5, 1.5) with seed 3") in result.notes
    w = output_weights(3, 3)
    assert result.output_weights == w.tolist()
    assert all(0.5 <= v < 1.5 for v in result.output_weights) and len(set(result.output_weights)) == 3
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    hessian = torch.autograd.functional.hessian(lambda v: (w * torch.softmax(v, -1)).sum(), x)
    assert torch.allclose(second.got, hessian, atol=1e-12)
    assert torch.allclose(second.expected, hessian, atol=1e-6)
    assert float(hessian.abs().max()) > 0.05
    # sum(out) would have compared zeros: its Hessian is 0
    flat = torch.autograd.functional.hessian(lambda v: torch.softmax(v, -1).sum(), x)
    assert torch.allclose(flat, torch.zeros(3, 3, dtype=torch.float64), atol=1e-12)


def test_second_order_weights_follow_the_seed():
    a = run("Softmax", var=["x=[0.5, -1.0, 2.0]"], order=2, seed=1)
    b = run("Softmax", var=["x=[0.5, -1.0, 2.0]"], order=2, seed=2)
    assert a.output_weights != b.output_weights
    assert a.output_weights == run("Softmax", var=["x=[0.5, -1.0, 2.0]"], order=2, seed=1).output_weights


def test_an_input_block_with_zeros_and_kinks_apart():
    got = torch.tensor([[0.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    expected = torch.tensor([[0.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    apart = torch.tensor([[False, False], [False, True]])
    assert InputCheck("x", got, expected, apart=apart).tested_nothing  # the only non-zero entry is apart
    assert not InputCheck("x", got, expected).tested_nothing
    assert not InputCheck("x", got * float("nan"), expected).tested_nothing  # nan is not zero


# --- point 7: causes from evidence only ---------------------------------------------------------

def test_entmax_nan_at_order_2_blames_no_saved_tensor_and_says_what_was_seen(cli):
    result = run("Entmax15", var=["x=[1.0, 0.5, -2.0]"], order=2)
    assert not result.ok
    assert all(c.ok for c in result.first) and result.gradcheck.ok
    assert result.causes == []  # ctx.alpha is a constant tensor, not an intermediate
    (seen,) = result.seen
    line = next(n for n, text in enumerate(Path(FUNCTIONS).read_text().splitlines(), 1)
                if "gppr = torch.where(y > 0" in text)
    assert seen.startswith("double backward gives nan at 9 of 9 entries for x (order 2), first at x[0] (= 1) -> grad[0]")
    assert "the first derivatives are finite at these inputs" in seen
    assert seen.endswith(f"the first nan comes out of PowBackward1, built in backward at verdict_functions.py line "
                         f"{line}: gppr = torch.where(y > 0, y ** (2 - ctx.alpha), torch.zeros_like(y))")
    assert result.verdict() == f"PROBLEM: {seen}"
    out = cli("check-function", f"{FUNCTIONS}:Entmax15", "--var", "x=[1.0, 0.5, -2.0]", "--order", "2")
    assert out.exit_code == 1
    text = " ".join(out.stdout.split())
    assert "saved a tensor it computed" not in text and "seen: double backward gives nan" in text
    doc = json.loads(cli("check-function", f"{FUNCTIONS}:Entmax15", "--var", "x=[1.0, 0.5, -2.0]", "--order", "2",
                         "--json").stdout)
    assert doc["causes"] == [] and doc["seen"] == [seen]


def test_entmax_first_order_is_right_on_the_default_input():
    result = run("Entmax15")
    assert result.ok, str(result)
    assert not result.first[0].tested_nothing


def test_a_constant_tensor_attribute_is_no_cause():
    result = run("CubeSavedConstant", var=["x=[0.5, -1.0, 2.0]"], order=2)
    assert not result.ok and all(c.ok for c in result.first)
    # d/dx of 3 x x.detach() is 3x: half of the true 6x, on the diagonal, times the weights
    w = torch.tensor(result.output_weights, dtype=torch.float64)
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    assert torch.allclose(result.second[0].got, torch.diag(3 * x * w), atol=1e-9)
    assert torch.allclose(result.second[0].expected, torch.diag(6 * x * w), atol=1e-5)
    assert result.causes == [] and result.seen == []
    assert result.verdict().startswith("PROBLEM: second derivatives: double backward vs finite differences of your "
                                       "backward disagree for x: x[0] (= 0.5) -> grad[0]")


def test_a_saved_intermediate_is_named_only_when_recomputing_it_fixes_the_second_order():
    result = check_function(f"{FIXTURES / 'functions.py'}:SwishSavedSigmoid", var=["x=[0.5, -1.0]"], order=2)
    (cause,) = [c.summary for c in result.causes]
    assert cause.startswith("right at first order but wrong at second: forward saved a tensor it computed "
                            "(saved tensor 2 of 2 (shape [2]))")
    assert "shown: with it recomputed from the input, the same backward's second derivatives agree" in cause


def test_a_backward_without_a_graph_is_named_from_the_replay():
    result = run("TanhDetached", var=["x=[0.5, -1.0, 2.0]"], order=2)
    assert not result.ok
    assert bool((result.second[0].got == 0).all())
    (cause,) = [c.summary for c in result.causes]
    assert cause.startswith("double backward gives zeros: backward's result does not depend differentiably on its "
                            "inputs even when run by hand with a graph")


def test_one_side_needs_every_element_of_the_side_wrong():
    result = check_function(f"{FIXTURES / 'functions.py'}:LeakyWrongNegative")
    negatives = [v for v in DEFAULT_INPUT if v <= 0]
    assert result.first[0].count == len(negatives)  # 0 too: backward gives 0.01 there, neither side's slope
    assert "wrong only where x <= 0 (right where x > 0)" in result.causes[0].summary


def test_a_backward_returning_none_is_named_not_called_untested():
    result = run("ExpNoGradient", var=["x=[0.5, -1.0]"])
    assert not result.ok and not result.first[0].tested_nothing  # exp' is not 0: a wrong backward, not a non-test
    assert [c.summary for c in result.causes] == ["backward returns zeros (or None) for x"]
    assert torch.allclose(result.first[0].expected, torch.diag(torch.exp(torch.tensor([0.5, -1.0], dtype=torch.float64))),
                          atol=1e-6)


def test_past_the_reference_limit_kinks_come_from_one_sided_differences():
    # 84 points (-6 to 4.375 by 1/8, exactly -3 and 3 among them): 7,056 Jacobian entries, past
    # the 4,096 the reference's derivative is taken for, so one-sided differences find the kinks.
    result = run("HardSwishOneSided", var=["x=arange(-6, 4.5, 0.125)"], ref="hardswish(x)")
    assert result.ok, str(result)
    assert result.ref_first == [] and result.first[0].kinks == 2
    assert [m.at for m in result.first[0].kinks_shown] == [-3.0, 3.0]


def test_a_smooth_reference_has_no_kinks_and_costs_no_entry_walk():
    from gradcli.pipeline import load
    from gradcli.verify.function.kinks import reference_kinks

    x = torch.tensor(DEFAULT_INPUT, dtype=torch.float64)
    weights = output_weights(14, 0)
    program, library = load("softmax(x, dim=0)")
    first, second = reference_kinks(program, library, {"x": x}, {}, weights, 2)
    assert first["x"].shape == (14, 14) and second["x"].shape == (14, 14)
    assert not first["x"].any() and not second["x"].any()
    program, library = load("abs(x)**3")  # abs at 0 is a kink, as check marks it (regions.py), at both orders
    first, second = reference_kinks(program, library, {"x": x}, {}, weights, 2)
    zero = DEFAULT_INPUT.index(0.0)
    assert first["x"].nonzero().tolist() == [[zero, zero]] == second["x"].nonzero().tolist()


def test_only_a_jacobian_mismatch_is_put_down_to_kinks():
    from gradcli.verify.finite_differences.gradchecks import GradcheckVerdict
    from gradcli.verify.function.kinks import AT_KINK, settle_at_kinks

    block = InputCheck("x", torch.eye(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64),
                       apart=torch.tensor([[True, False], [False, False]]))
    failed = GradcheckVerdict(False, False, "Jacobian mismatch for output 0 with respect to input 0", 2)
    settled = settle_at_kinks(failed, [block])
    assert (settled.ok, settled.unreliable_points, settled.unreliable_reasons) == (True, 1, {AT_KINK: 1})
    other = GradcheckVerdict(False, False, "Backward is not reentrant, i.e., running backward with same input", 2)
    assert settle_at_kinks(other, [block]) is other
    wrong = InputCheck("x", torch.eye(2, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64), count=2,
                       apart=block.apart)
    assert settle_at_kinks(failed, [wrong]) is failed  # wrong entries besides the kink: gradcheck stands


NOISY = '''
import torch


class NoisyScale(torch.autograd.Function):
    """x * noise, the noise drawn inside forward: two calls differ."""

    @staticmethod
    def forward(ctx, x):
        noise = torch.rand_like(x)
        ctx.save_for_backward(noise)
        return x * noise

    @staticmethod
    def backward(ctx, g):
        (noise,) = ctx.saved_tensors
        return g * noise


class NoiseGiven(torch.autograd.Function):
    """The same with the noise passed in (not differentiated: its gradient is declared None)."""

    @staticmethod
    def forward(ctx, x, noise: torch.Tensor):
        ctx.save_for_backward(noise)
        return x * noise

    @staticmethod
    def backward(ctx, g):
        (noise,) = ctx.saved_tensors
        return g * noise, None
'''


def test_a_forward_that_draws_random_numbers_is_refused_not_blamed_on_backward(cli, tmp_path):
    module = tmp_path / "noisy.py"
    module.write_text(NOISY)
    result = cli("check-function", f"{module}:NoisyScale")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {module}:NoisyScale: forward is not deterministic: two calls at the "
                                    "same inputs differ (its output, element 0: ")
    assert "pass the noise in as an input" in result.stderr
    # The noise as data: deterministic, and right for x (noise's own gradient, None, is then wrong: it is a
    # floating input, so it is differentiated unless declared).
    given = check_function(f"{module}:NoiseGiven", ["noise=rand(14)"], seed=3)
    assert given.first[0].name == "x" and given.first[0].ok
    # In a package walk it is one line that could not run, and the walk fails.
    from gradcli.verify.discovery.check import check_discovered

    walked = check_discovered(str(module))
    assert {e.name.rsplit(":", 1)[1]: e.status for e in walked.entries}["NoisyScale"] == "could not run"


FLAT = '''
import torch


class RowSoftmaxBuggy(torch.autograd.Function):
    """softmax over each row whose backward sums over the whole tensor: rows leak into each other."""

    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, dim=1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum())


class TripleInFloat32(torch.autograd.Function):
    """3x computed in float32: at x = 100 a step of 1e-6 is lost to float32's rounding."""

    @staticmethod
    def forward(ctx, x):
        return (x.float() * 3).double()

    @staticmethod
    def backward(ctx, g):
        return 3 * g
'''


def test_a_flat_forward_note_only_where_finite_differences_are_broken(tmp_path):
    module = tmp_path / "flat_ops.py"
    module.write_text(FLAT)
    leaky = check_function(f"{module}:RowSoftmaxBuggy", ["x=[[0.5, -1.0, 2.0], [1.0, 0.25, -0.5]]"])
    # Other rows' outputs do not depend on x at all: finite differences' 0 is right there, so
    # the entries backward leaks into are its fault, and no note blames finite differences.
    assert not leaky.ok and leaky.first[0].count == 18
    assert not any("finite differences are unreliable" in note for note in leaky.notes), leaky.notes
    rounded = check_function(f"{module}:TripleInFloat32", ["x=[100.0, 200.0]"])
    assert not rounded.ok  # the disagreement stands without --ref ...
    assert any("the forward does not change over the step in float64: 2" in note for note in rounded.notes)
