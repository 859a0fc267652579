"""The per-parameter judgement compare and the distributed runs share (gradcli/comparison/gradients.py).

The expected numbers are computed here with torch, independently of the module."""

import math

import pytest
import torch

from gradcli.comparison.gradients import Flag, Tolerance, compare_gradient, compare_gradients


def test_the_relative_error_is_the_norm_of_the_difference_over_the_reference_norm():
    ref = torch.tensor([3.0, 4.0])
    cand = torch.tensor([3.0, 4.5])
    row = compare_gradient("w", ref, cand, tolerance=1e-3)
    assert math.isclose(row.rel_err, 0.5 / 5.0)
    assert math.isclose(row.max_abs_err, 0.5)
    assert row.flags == [Flag.DIFFERS]


def test_a_float16_rounding_of_the_reference_agrees_within_the_float16_tolerance():
    torch.manual_seed(0)
    ref = torch.randn(1000)
    cand = ref.half().float()
    tol = Tolerance(torch.float16, reduction=1).value
    row = compare_gradient("w", ref, cand, tol)
    expected = float(torch.linalg.vector_norm(cand.double() - ref.double()) / torch.linalg.vector_norm(ref.double()))
    assert math.isclose(row.rel_err, expected, rel_tol=1e-12)
    assert row.flags == [Flag.AGREES]


def test_zeros_and_infinities_only_the_candidate_has_are_counted_and_flagged():
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
    flushed = compare_gradient("w", ref, torch.tensor([0.0, 2.0, 3.0, 4.0]), tolerance=0.1)
    assert flushed.zero_share == 0.25 and flushed.flags == [Flag.UNDERFLOW]  # 1/‖ref‖ = 0.18 > 0.1
    # An element at rounding level (below tolerance × max|g_ref|) lost to zero is no underflow,
    # nor is a loss the gradient's norm absorbs within tolerance (a ReLU flipping in bfloat16).
    absorbed = compare_gradient("w", ref, torch.tensor([0.0, 2.0, 3.0, 4.0]), tolerance=0.2)
    assert absorbed.zero_share == 0.25 and absorbed.flags == [Flag.AGREES]
    tiny = compare_gradient("w", torch.tensor([1e-9, 2.0, 3.0, 4.0]), torch.tensor([0.0, 2.0, 3.0, 4.0]), tolerance=1e-3)
    assert tiny.zero_share == 0.0 and tiny.flags == [Flag.AGREES]
    ref = torch.tensor([1e-9, 2.0, 3.0, 4.0])
    overflowed = compare_gradient("w", ref, torch.tensor([1e-9, math.inf, 3.0, math.nan]), tolerance=1.0)
    assert overflowed.nonfinite_share == 0.5 and overflowed.flags == [Flag.OVERFLOW]
    assert overflowed.as_dict()["rel_err"] == "inf"


def test_a_gradient_only_one_side_has_is_missing_and_every_name_is_kept():
    rows = compare_gradients({"a": torch.ones(2), "b": None}, {"a": torch.ones(2), "c": torch.ones(1)},
                             {"a": 1e-6, "b": 1e-6, "c": 1e-6})
    assert [(r.name, r.flags) for r in rows] == [("a", [Flag.AGREES]), ("b", [Flag.MISSING]), ("c", [Flag.MISSING])]


def test_the_tolerance_grows_with_the_square_root_of_the_reduction_length():
    one = Tolerance(torch.bfloat16, reduction=1).value
    assert math.isclose(Tolerance(torch.bfloat16, reduction=400).value, 20 * one)
    assert one > Tolerance(torch.float16).value > Tolerance(torch.float32).value


def test_gradients_of_two_shapes_are_refused_with_both_shapes():
    """A candidate gradient of another shape than the reference's (torch's own shapes) is a
    ValueError naming both, not a comparison."""
    reference, candidate = torch.zeros(3, 2), torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"^w: reference gradient \(3, 2\) vs candidate \(2, 3\)$"):
        compare_gradient("w", reference, candidate, 1e-3)
