"""`grads`' size verdicts at their boundaries, on both sides, with torch's numbers.

Each parameter here is one float64 knob `k` (value 1) and the output is `sum(gain * k * x)`
with x = 1, so torch's gradient of knob i is exactly its gain and ‖grad‖/‖param‖ is the gain
to the last bit: a ratio can be put exactly on a threshold, or one float either side of it.
Every test first checks that gradcli's ratios are torch's (autograd.grad and vector_norm, here),
then that the flag is there exactly where torch's number crosses the bound (verdicts.py,
thresholds.py): `>` against `>=`, `<=` against `<`, the median's count, the yardstick's
inclusive bounds, the split's band and anchors.
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from torch import nn

import gradcli
from gradcli.health.thresholds import HEALTHY_HIGH, HEALTHY_LOW

DOWN, UP = -math.inf, math.inf


class Knobs(nn.Module):
    """One float64 parameter per gain; the gradient of knob i is gain i times x."""

    def __init__(self, gains, size: int = 1):
        super().__init__()
        self.gains = [float(g) for g in gains]
        self.knobs = nn.ParameterList(nn.Parameter(torch.ones(size, dtype=torch.float64)) for _ in gains)

    def forward(self, x):
        return sum(g * (k * x).sum() for g, k in zip(self.gains, self.knobs))


def _torch_ratios(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """‖grad‖/‖param‖ of each parameter, from torch alone."""
    named = list(model.named_parameters())
    grads = torch.autograd.grad(model(x), [p for _, p in named])
    return {name: (torch.linalg.vector_norm(g) / torch.linalg.vector_norm(p.detach())).item()
            for (name, p), g in zip(named, grads)}


def _run(gains, **options):
    model, x = Knobs(gains), torch.ones(1, dtype=torch.float64)
    truth = _torch_ratios(model, x)
    result = gradcli.grads(model, x, **options)
    assert {p.name: p.ratio for p in result.params} == truth  # gradcli's numbers are torch's
    return result, truth, {p.name: p for p in result.params}


def _findings(param, flag):
    return [f.reason for f in param.findings if f.flag == flag]


@pytest.mark.parametrize("gain", [math.nextafter(1e4, DOWN), 1e4, math.nextafter(1e4, UP)])
def test_exploding_begins_one_float_above_the_explode_bound(gain):
    result, truth, params = _run([1.0, 2.0, 3.0, gain])
    last = params["knobs.3"]
    assert bool(_findings(last, "EXPLODING")) is (truth["knobs.3"] > 1e4)
    if truth["knobs.3"] > 1e4:
        assert _findings(last, "EXPLODING") == ["‖grad‖/‖param‖ above 10000: one SGD step would dwarf the weights"]
    assert all(not p.findings for name, p in params.items() if name != "knobs.3")


@pytest.mark.parametrize("gain", [math.nextafter(1e-7, DOWN), 1e-7, math.nextafter(1e-7, UP)])
def test_vanishing_begins_one_float_below_the_vanish_bound(gain):
    """spread 1e12 keeps the median's rule out: only the absolute bound speaks."""
    result, truth, params = _run([1.0, 1.0, 1.0, gain], spread=1e12)
    expected = ["‖grad‖/‖param‖ below 1e-07: an SGD step cannot change it"] if truth["knobs.3"] < 1e-7 else []
    assert _findings(params["knobs.3"], "VANISHING") == expected


@pytest.mark.parametrize("offset", [DOWN, 0, UP])
def test_the_median_rule_below_flags_only_past_median_over_spread(offset):
    bound = 1.0 / 1e4  # the median of [1, 1, 1, g] is 1 for any g < 1
    gain = bound if offset == 0 else math.nextafter(bound, offset)
    result, truth, params = _run([1.0, 1.0, 1.0, gain])
    median = statistics.median(truth.values())
    assert result.median_ratio == median == 1.0
    below = truth["knobs.3"] < median / 1e4
    assert [f.flag for f in params["knobs.3"].findings] == (["VANISHING"] if below else [])
    if below:
        assert "more than 10000x below the model's median 1" in params["knobs.3"].findings[0].reason


@pytest.mark.parametrize("offset", [DOWN, 0, UP])
def test_the_median_rule_above_flags_only_past_median_times_spread(offset):
    gain = 100.0 if offset == 0 else math.nextafter(100.0, offset)
    result, truth, params = _run([1.0, 1.0, 1.0, gain], spread=100.0, explode=1e9)
    median = statistics.median(truth.values())
    above = truth["knobs.3"] > median * 100.0
    assert [f.flag for f in params["knobs.3"].findings] == (["EXPLODING"] if above else [])
    if above:
        assert "more than 100x above the model's median 1" in params["knobs.3"].findings[0].reason


@pytest.mark.parametrize("gains", [[1.0, 1e-6], [1.0, 1.0, 1e-6], [1.0, 1.0, 1.0, 1e-6]])
def test_the_median_needs_three_ratios(gains):
    """Two ratios give no median (no relative verdict); three or more do."""
    result, truth, params = _run(gains)
    if len(truth) >= 3:
        assert result.median_ratio == statistics.median(truth.values())
    else:
        assert result.median_ratio is None
    last = params[f"knobs.{len(gains) - 1}"]
    assert [f.flag for f in last.findings] == (["VANISHING"] if len(truth) >= 3 else [])


@pytest.mark.parametrize("explode", [1.0, math.nextafter(1.0, DOWN)])
def test_the_median_judges_up_to_and_at_the_explode_bound(explode):
    """The median (1.0) judges the others while it is within [vanish, explode], bounds included."""
    result, truth, params = _run([1e-6, 1.0, 5.0], explode=explode)
    judged = result.median_ratio <= explode
    assert _findings(params["knobs.0"], "VANISHING") != [] if judged else params["knobs.0"].findings == []
    assert [f.flag for f in params["knobs.2"].findings] == ["EXPLODING"]  # 5 > explode either way


@pytest.mark.parametrize("vanish", [1.0, math.nextafter(1.0, UP)])
def test_the_median_judges_down_to_and_at_the_vanish_bound(vanish):
    result, truth, params = _run([0.5, 1.0, 2e4], vanish=vanish, explode=1e5)
    judged = result.median_ratio >= vanish
    assert [f.flag for f in params["knobs.2"].findings] == (["EXPLODING"] if judged else [])
    assert [f.flag for f in params["knobs.0"].findings] == ["VANISHING"]  # 0.5 < vanish either way


@pytest.mark.parametrize("anchor", [1e3, math.nextafter(1e3, UP)])
def test_a_split_needs_its_anchor_inside_the_healthy_band(anchor):
    """Median 1e-6 (below the band) and one knob at the band's top: the three at the median
    vanish (the split's words); one float above the band the anchor is not healthy, and it is
    the one off (over the median by more than the spread)."""
    result, truth, params = _run([1e-6, 1e-6, 1e-6, anchor])
    in_band = HEALTHY_LOW <= truth["knobs.3"] <= HEALTHY_HIGH
    assert in_band is (anchor == 1e3)
    for name in ("knobs.0", "knobs.1", "knobs.2"):
        found = params[name].findings
        assert [f.flag for f in found] == (["VANISHING"] if in_band else [])
        if in_band:
            assert "under the healthy band (0.0003 to 1000), as the model's median 1e-06 is" in found[0].reason
            assert "knobs.3, which is in the band: the loss barely depends on it" in found[0].reason
    assert [f.flag for f in params["knobs.3"].findings] == ([] if in_band else ["EXPLODING"])


@pytest.mark.parametrize("offset", [0, UP])
def test_a_split_anchor_must_be_more_than_spread_from_the_median(offset):
    bound = 1e-6 * 1e4  # the median times the spread, as Python rounds it
    gain = bound if offset == 0 else math.nextafter(bound, offset)
    result, truth, params = _run([1e-6, 1e-6, 1e-6, gain])
    anchored = truth["knobs.3"] > result.median_ratio * 1e4
    assert [f.flag for f in params["knobs.0"].findings] == (["VANISHING"] if anchored else [])
    assert params["knobs.3"].findings == []


@pytest.mark.parametrize("offset", [DOWN, 0, UP])
def test_over_the_band_an_anchor_must_be_more_than_spread_below_the_median(offset):
    """The mirror of the above: median 2e3 over the band, a knob in the band anchors only strictly
    under median / spread; at it or one float above, the median judges (and finds nothing)."""
    bound = 2e3 / 1e4  # the median over the spread, as Python rounds it
    gain = bound if offset == 0 else math.nextafter(bound, offset)
    result, truth, params = _run([2e3, 2e3, 2e3, gain])
    anchored = truth["knobs.3"] < result.median_ratio / 1e4
    assert anchored is (offset == DOWN)
    assert all([f.flag for f in params[f"knobs.{k}"].findings] == (["EXPLODING"] if anchored else []) for k in range(3))
    assert params["knobs.3"].findings == []


@pytest.mark.parametrize("median", [HEALTHY_LOW, math.nextafter(HEALTHY_LOW, DOWN)])
def test_no_split_while_the_median_is_in_the_band_its_edge_included(median):
    result, truth, params = _run([median, median, median, 1.0], spread=100.0)
    assert result.median_ratio == median
    split = not (HEALTHY_LOW <= median <= HEALTHY_HIGH)
    assert [f.flag for f in params["knobs.0"].findings] == (["VANISHING"] if split else [])
    assert [f.flag for f in params["knobs.3"].findings] == ([] if split else ["EXPLODING"])


@pytest.mark.parametrize("median", [HEALTHY_HIGH, math.nextafter(HEALTHY_HIGH, UP)])
def test_a_split_over_the_band_says_the_median_side_explodes(median):
    result, truth, params = _run([median, median, median, 0.05])
    split = median > HEALTHY_HIGH
    assert [f.flag for f in params["knobs.0"].findings] == (["EXPLODING"] if split else [])
    if split:
        assert "over the healthy band" in params["knobs.0"].findings[0].reason
        assert "a step that suits it would dwarf these weights" in params["knobs.0"].findings[0].reason
    assert [f.flag for f in params["knobs.3"].findings] == ([] if split else ["VANISHING"])


@pytest.mark.parametrize("x", [[0.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
def test_zero_only_when_every_element_of_the_gradient_is_zero(x):
    model, inputs = Knobs([1.0, 1.0, 1.0], size=2), torch.tensor(x, dtype=torch.float64)
    grads = torch.autograd.grad(model(inputs), list(model.parameters()))
    zeros = [int((g == 0).sum()) for g in grads]
    result = gradcli.grads(model, inputs)
    for param, count in zip(result.params, zeros):
        assert param.zero_share == count / 2
        assert ("ZERO" in param.flags) is (count == 2)
    assert result.ok  # ZERO fails only with strict


@pytest.mark.parametrize("strict", [False, True])
def test_only_strict_fails_a_size_finding(strict):
    result, truth, params = _run([1.0, 1.0, math.nextafter(1e4, UP)], strict=strict)
    assert params["knobs.2"].flags == ["EXPLODING"]
    assert result.ok is (not strict)


@pytest.mark.parametrize(("gain", "kind"), [(math.inf, "inf"), (math.nan, "nan")])
def test_a_nonfinite_gradient_says_nan_or_inf_as_torch_finds_it(gain, kind):
    model, x = Knobs([1.0, 1.0, gain]), torch.ones(1, dtype=torch.float64)
    grads = torch.autograd.grad(model(x), list(model.parameters()))
    assert bool(torch.isnan(grads[2]).any()) is (kind == "nan") and not bool(torch.isfinite(grads[2]).all())
    result = gradcli.grads(model, x)
    third = {p.name: p for p in result.params}["knobs.2"]
    assert third.flags == ["NONFINITE"] and third.findings[0].reason.startswith(f"{kind} in its gradient")
    assert [p.flags for p in result.params[:2]] == [[], []] and not result.ok


@pytest.mark.parametrize("offset", [0, DOWN])
def test_in_a_split_under_the_band_a_knob_at_its_floor_is_not_vanishing(offset):
    """Median 1e-6, anchor 1.0; a fifth knob at the band's floor (3e-4, in it) is judged by the
    median (within the spread: nothing), one float below it vanishes with the median's side."""
    gain = HEALTHY_LOW if offset == 0 else math.nextafter(HEALTHY_LOW, offset)
    result, truth, params = _run([1e-6, 1e-6, 1e-6, gain, 1.0])
    below = truth["knobs.3"] < HEALTHY_LOW
    assert [f.flag for f in params["knobs.3"].findings] == (["VANISHING"] if below else [])
    assert [f.flag for f in params["knobs.0"].findings] == ["VANISHING"] and params["knobs.4"].findings == []


@pytest.mark.parametrize("offset", [0, UP])
def test_in_a_split_over_the_band_a_knob_at_its_ceiling_is_not_exploding(offset):
    gain = HEALTHY_HIGH if offset == 0 else math.nextafter(HEALTHY_HIGH, offset)
    result, truth, params = _run([2e3, 2e3, 2e3, gain, 0.05])
    above = truth["knobs.3"] > HEALTHY_HIGH
    assert [f.flag for f in params["knobs.3"].findings] == (["EXPLODING"] if above else [])
    assert [f.flag for f in params["knobs.0"].findings] == ["EXPLODING"] and params["knobs.4"].findings == []


def test_a_finite_gradient_whose_norm_overflows_is_exploding_not_nonfinite():
    """[1e308, -1e308] in float64: every element finite (torch.isfinite), the norm inf."""
    model, x = Knobs([1e308, 1.0, 1.0], size=2), torch.tensor([1.0, -1.0], dtype=torch.float64)
    grads = torch.autograd.grad(model(x), list(model.parameters()))
    assert bool(torch.isfinite(grads[0]).all()) and torch.linalg.vector_norm(grads[0]).item() == math.inf
    params = {p.name: p for p in gradcli.grads(model, x).params}
    assert [f.flag for f in params["knobs.0"].findings] == ["EXPLODING"]
    assert not params["knobs.1"].findings and not params["knobs.2"].findings


@pytest.mark.parametrize(("dtype", "gain"), [(torch.float32, 1e-25), (torch.float64, 1e-170)])
def test_a_gradient_whose_squares_underflow_is_vanishing_not_unjudged(dtype, gain):
    """Every element non-zero (torch.count_nonzero), yet torch's own norm in the gradient's dtype
    is 0: the squares underflow (float32 below ~1e-23, float64 below ~1e-162). The norm is the
    elements' hypot (Python's math.hypot, which scales), so the ratio is tiny, not 0, and vanishes."""

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.small = nn.Parameter(torch.ones(2, dtype=dtype))
            self.rest = nn.ParameterList(nn.Parameter(torch.ones(2, dtype=dtype)) for _ in range(2))

        def forward(self, x):
            return gain * (self.small * x).sum() + sum((k * x).sum() for k in self.rest)

    model, x = Tiny(), torch.ones(2, dtype=dtype)
    grad = torch.autograd.grad(model(x), [model.small])[0]
    assert int(torch.count_nonzero(grad)) == 2 and torch.linalg.vector_norm(grad).item() == 0.0  # torch's premise
    norm = math.hypot(*grad.double().tolist())
    params = {p.name: p for p in gradcli.grads(model, x).params}
    small = params["small"]
    assert small.grad_norm == pytest.approx(norm, rel=1e-12, abs=0)
    assert small.ratio == pytest.approx(norm / torch.linalg.vector_norm(model.small.detach()).item(), rel=1e-12, abs=0)
    assert _findings(small, "VANISHING") == ["‖grad‖/‖param‖ below 1e-07: an SGD step cannot change it"]


@pytest.mark.parametrize("offset", [0, DOWN])
def test_a_split_anchor_may_sit_on_the_band_s_floor(offset):
    """Median 2e3 (over the band), a knob exactly at the band's floor 3e-4 is inside it and far
    below the median: it anchors the split, and the median's side explodes. One float below the
    floor it is out of the band: no split, and the median judges it (more than 1e4x below)."""
    gain = HEALTHY_LOW if offset == 0 else math.nextafter(HEALTHY_LOW, offset)
    result, truth, params = _run([gain, 2e3, 2e3, 2e3])
    median = statistics.median(truth.values())
    assert result.median_ratio == median == 2e3 and HEALTHY_HIGH < median
    inside = HEALTHY_LOW <= truth["knobs.0"] < median / 1e4
    assert [f.flag for f in params["knobs.0"].findings] == ([] if inside else ["VANISHING"])
    assert all([f.flag for f in params[f"knobs.{k}"].findings] == (["EXPLODING"] if inside else []) for k in (1, 2, 3))
    if inside:
        assert "which is in the band" in params["knobs.1"].findings[0].reason and "knobs.0" in params["knobs.1"].findings[0].reason


@pytest.mark.parametrize(("dtype", "size"), [(torch.float32, 1e20), (torch.float64, 1e160), (torch.float32, 1e-25)])
def test_a_parameter_whose_squares_over_or_underflow_is_measured_by_its_elements(dtype, size):
    """torch's norm in the parameter's dtype is inf (or 0) while every element is finite and non-zero:
    the ratio is against the elements' hypot (Python's math.hypot, which scales), as torch's
    float64 gradient over it gives, and judged by size like any other."""

    class Sized(nn.Module):
        def __init__(self):
            super().__init__()
            self.odd = nn.Parameter(torch.full((2,), size, dtype=dtype))
            self.rest = nn.ParameterList(nn.Parameter(torch.ones(2, dtype=dtype)) for _ in range(3))

        def forward(self, x):
            return (self.odd * x).sum() + sum((k * x).sum() for k in self.rest)

    model, x = Sized(), torch.ones(2, dtype=dtype)
    assert torch.linalg.vector_norm(model.odd.detach()).item() in (0.0, math.inf)  # torch's premise
    grad = torch.autograd.grad(model(x), [model.odd])[0]
    ratio = math.hypot(*grad.double().tolist()) / math.hypot(*model.odd.detach().double().tolist())
    params = {p.name: p for p in gradcli.grads(model, x).params}
    assert params["odd"].ratio == pytest.approx(ratio, rel=8 * torch.finfo(dtype).eps, abs=0)  # the gradient's norm is in its dtype
    expected = "VANISHING" if ratio < 1e-7 else "EXPLODING" if ratio > 1e4 else None
    assert [f.flag for f in params["odd"].findings] == ([expected] if expected else [])


def test_a_ratio_below_float64_s_range_is_vanishing_and_counts_in_the_median():
    """A gradient of 1e-320 (a float64 subnormal, not zero: torch.count_nonzero) over a weight of
    1e10: Python's own division gives 0.0, a ratio below float64's range, far under any bound."""

    class Underflowing(nn.Module):
        def __init__(self):
            super().__init__()
            self.big = nn.Parameter(torch.full((1,), 1e10, dtype=torch.float64))
            self.rest = nn.ParameterList(nn.Parameter(torch.ones(1, dtype=torch.float64)) for _ in range(2))

        def forward(self, x):
            return 1e-320 * (self.big * x).sum() + sum((k * x).sum() for k in self.rest)

    model, x = Underflowing(), torch.ones(1, dtype=torch.float64)
    grads = torch.autograd.grad(model(x), list(model.parameters()))
    assert int(torch.count_nonzero(grads[0])) == 1
    truth = [g.item() / p.item() for g, p in zip(grads, model.parameters())]
    assert truth[0] == 0.0
    result = gradcli.grads(model, x)
    params = {p.name: p for p in result.params}
    assert params["big"].ratio == 0.0 and params["big"].zero_share == 0.0 and "ZERO" not in params["big"].flags
    assert _findings(params["big"], "VANISHING") == ["‖grad‖/‖param‖ below 1e-07: an SGD step cannot change it"]
    assert result.median_ratio == statistics.median(truth) == 1.0  # three ratios, the 0 among them
