"""Which side is off when the median rule splits a model in two: the healthy band decides.

A parameter far from the model's median but inside the band every healthy model measured
shows (thresholds.py) is the healthy one; the median's side, outside the band, is flagged.
The measured models (healthy MLP, CNN, LSTM, Transformer; the 40-layer MLPs) never split, so
their verdicts are the median's, as before.
"""

from __future__ import annotations

import json
import statistics
import sys

import pytest
import torch
from torch import nn

import gradcli
from gradcli.health.result import ParamHealth
from gradcli.health.thresholds import HEALTHY_HIGH, HEALTHY_LOW, Thresholds
from gradcli.health.verdicts import find_split, judge_sizes, median_ratio
from paths import ROOT

EXAMPLES = ROOT / "examples" / "grads"
sys.path.insert(0, str(EXAMPLES))
import faults  # noqa: E402
import healthy  # noqa: E402

NORM2 = ("norm2.weight", "norm2.bias")


def by_name(result) -> dict[str, ParamHealth]:
    return {p.name: p for p in result.params}


def test_a_normalised_output_makes_the_layers_before_it_vanish_not_the_norm_explode():
    # The loss is the mean square of norm2's output, which with norm2's weight 1 and bias 0 is
    # 1 whatever comes before it: only norm2's own parameters move it.
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(d_model=8, nhead=2)
    result = gradcli.grads(model, torch.randn(3, 4, 8), loss=lambda out: out.pow(2).mean())
    params = by_name(result)
    assert len(params) == 12
    for name in NORM2:
        assert HEALTHY_LOW <= params[name].ratio <= HEALTHY_HIGH
        assert params[name].ratio > 1e4 * result.median_ratio
        assert params[name].findings == []
    others = [p for name, p in params.items() if name not in NORM2]
    assert all(1e-7 < p.ratio < 1e-4 for p in others)  # rounding level, above --vanish
    assert all(p.flags == ["VANISHING"] for p in others)
    (reason,) = {p.findings[0].reason for p in others}  # one sentence: one line under Findings
    assert reason == (
        "‖grad‖/‖param‖ under the healthy band (0.0003 to 1000), as the model's median "
        f"{result.median_ratio:.2g} is, more than 10000x under norm2.weight and norm2.bias, which are "
        "in the band: the loss barely depends on it"
    )
    assert result.ok and not gradcli.grads(model, torch.randn(3, 4, 8), loss=lambda out: out.pow(2).mean(),
                                           strict=True).ok


USERS_COMMAND = ("grads", "torch.nn:TransformerEncoderLayer", "--init", "d_model=8", "--init", "nhead=2",
                 "--var", "src=randn(3,4,8)", "--loss", "out.pow(2).mean()", "--seed", "0")


def test_the_users_command_line(cli):
    document = json.loads(cli(*USERS_COMMAND, "--json").stdout)
    flags = {p["name"]: p["flags"] for p in document["parameters"]}
    assert {name: flags.pop(name) for name in NORM2} == {"norm2.weight": [], "norm2.bias": []}
    assert len(flags) == 10 and all(f == ["VANISHING"] for f in flags.values())
    result = cli(*USERS_COMMAND)
    assert result.exit_code == 0, result.output
    assert "and 6 more: VANISHING (warning): ‖grad‖/‖param‖ under the healthy band" in result.stdout
    assert "more than 10000x under norm2.weight and norm2.bias, which are in the band" in result.stdout
    assert "EXPLODING (warning)" not in result.stdout
    assert "10 with warnings (failing only with --strict)" in result.stdout
    strict = cli(*USERS_COMMAND, "--strict")
    assert strict.exit_code == 1 and "PROBLEM: 10 VANISHING (of 12 parameters that should learn)" in strict.stdout


class ShrunkBranches(nn.Module):
    """The mirror: three branches initialised at 0.03x their default scale, each behind a
    LayerNorm without parameters (scale-invariant, so their gradient grows as they shrink:
    ‖grad‖/‖param‖ about 3e3), and a head at 10x its default scale, in the band."""

    def __init__(self):
        super().__init__()
        self.branches = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))
        self.norm = nn.LayerNorm(16, elementwise_affine=False)
        self.head = nn.Linear(16, 4, bias=False)
        with torch.no_grad():
            self.head.weight.mul_(10)
            for p in self.branches.parameters():
                p.mul_(0.03)

    def forward(self, x):
        return self.head(sum(self.norm(branch(x)) for branch in self.branches))


def test_the_mirror_one_layer_in_the_band_far_below_the_rest_over_it_the_rest_explode():
    torch.manual_seed(0)
    model, x, y = ShrunkBranches(), torch.randn(32, 16), torch.randint(0, 4, (32,))
    result = gradcli.grads(model, x, loss=lambda out: nn.functional.cross_entropy(out, y))
    params = by_name(result)
    head = params.pop("head.weight")
    assert HEALTHY_LOW <= head.ratio <= HEALTHY_HIGH and head.ratio < result.median_ratio / 1e4
    assert head.findings == []  # the median rule alone called it VANISHING
    assert len(params) == 6 and all(HEALTHY_HIGH < p.ratio < 1e4 for p in params.values())
    assert all(p.flags == ["EXPLODING"] for p in params.values())
    (reason,) = {p.findings[0].reason for p in params.values()}
    assert reason == (
        "‖grad‖/‖param‖ over the healthy band (0.0003 to 1000), as the model's median "
        f"{result.median_ratio:.2g} is, more than 10000x over head.weight, which is in the band: "
        "a step that suits it would dwarf these weights"
    )


def rows(*ratios: float) -> list[ParamHealth]:
    return [ParamHealth(f"p{k}", "", "Linear", (1,), 1, False, k, param_norm=1.0, reference_norm=1.0, grad_norm=r)
            for k, r in enumerate(ratios)]


@pytest.mark.parametrize(("ratios", "expected"), [
    # The median's side below the band, one far above it and in the band: the side vanishes.
    ((1e-6, 2e-6, 3e-6, 0.1), ["VANISHING", "VANISHING", "VANISHING", None]),
    # The far one above the band too: the band cannot clear it; the median rule, as before.
    ((1e-6, 2e-6, 3e-6, 5e3), [None, None, None, "EXPLODING"]),
    # The median in the band: it judges, even a far one that is itself in the band.
    ((1e-2, 2e-2, 3e-2, 500.0), [None, None, None, "EXPLODING"]),
    # The mirror: the median's side over the band, one far below it and in the band.
    ((3e3, 4e3, 5e3, 0.1), ["EXPLODING", "EXPLODING", "EXPLODING", None]),
    # The far one below the band too: VANISHING against the median, as before.
    ((2e3, 3e3, 4e3, 1e-4), [None, None, None, "VANISHING"]),
    # Within the median's side, a ratio in the band is not flagged.
    ((1e-6, 2e-6, 3e-6, 5e-3, 0.2), ["VANISHING", "VANISHING", "VANISHING", None, None]),
])
def test_the_band_decides_only_when_the_median_is_outside_it(ratios, expected):
    params = rows(*ratios)
    judge_sizes(params, Thresholds(), median_ratio(params))
    assert [p.flags[0] if p.flags else None for p in params] == expected


def measured_models():
    """The models of README's measured table, with the inputs and loss it used."""
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    return [
        (healthy.MLP(), torch.randn(64, 32), lambda out: out.pow(2).mean()),
        (healthy.CNN(), torch.randn(16, 3, 16, 16), lambda out: out.pow(2).mean()),
        (healthy.CNN(), torch.randn(16, 3, 16, 16), lambda out: out.pow(2).sum()),
        (healthy.LSTM(), torch.randn(16, 12, 8), lambda out: out.pow(2).mean()),
        (healthy.Transformer(), torch.randn(16, 10, 32), lambda out: out.pow(2).mean()),
        (faults.DeepMLP(), x, lambda out: ((out - y) ** 2).mean()),
        (faults.ExplodingMLP(), x, lambda out: ((out - y) ** 2).mean()),
        (faults.VanishingMLP(), x, lambda out: ((out - y) ** 2).mean()),
    ]


@pytest.mark.parametrize("seed", range(5))
def test_the_measured_models_never_split_so_their_verdicts_are_the_medians(seed):
    torch.manual_seed(seed)
    for model, x, loss in measured_models():
        result = gradcli.grads(model, x, loss=loss)
        sized = [p for p in result.judged if p.ratio is not None and not {"NO GRAD", "ZERO", "NONFINITE"} & set(p.flags)]
        assert find_split(sized, result.thresholds, result.median_ratio) is None, type(model).__name__


@pytest.mark.parametrize(("far", "named"), [(3, "p7, p8 and p9"), (4, "p7, p8, p9 and 1 more"),
                                            (5, "p7, p8, p9 and 2 more")])
def test_a_side_of_more_than_three_names_three_and_counts_the_rest(far, named):
    """Seven ratios under the band, four or five in it and more than 10000x above their
    median: the sentence names the first three in forward order and counts the others."""
    ratios = (1e-6, 2e-6, 3e-6, 4e-6, 5e-6, 6e-6, 7e-6, 0.1, 0.11, 0.12, 0.13, 0.14)[:7 + far]
    params = rows(*ratios)
    median = statistics.median(ratios)
    assert median < HEALTHY_LOW and all(HEALTHY_LOW <= r <= HEALTHY_HIGH and r > 1e4 * median for r in ratios[7:])
    judge_sizes(params, Thresholds(), median_ratio(params))
    assert [p.flags[0] if p.flags else None for p in params] == ["VANISHING"] * 7 + [None] * far
    assert params[0].findings[0].reason == (
        f"‖grad‖/‖param‖ under the healthy band ({HEALTHY_LOW:g} to {HEALTHY_HIGH:g}), as the model's median "
        f"{median:.2g} is, more than 10000x under {named}, which are in the band: the loss barely depends on it")


def test_two_below_the_band_under_a_median_over_it_are_them():
    """The mirror with two in the band: the sentence speaks of them."""
    ratios = (3e3, 4e3, 5e3, 6e3, 0.1, 0.2)
    params = rows(*ratios)
    median = statistics.median(ratios)
    assert median > HEALTHY_HIGH and all(HEALTHY_LOW <= r < median / 1e4 for r in ratios[4:])
    judge_sizes(params, Thresholds(), median_ratio(params))
    assert [p.flags[0] if p.flags else None for p in params] == ["EXPLODING"] * 4 + [None] * 2
    assert params[0].findings[0].reason == (
        f"‖grad‖/‖param‖ over the healthy band ({HEALTHY_LOW:g} to {HEALTHY_HIGH:g}), as the model's median "
        f"{median:.2g} is, more than 10000x over p4 and p5, which are in the band: a step that suits them would "
        "dwarf these weights")


@pytest.mark.parametrize(("ratios", "expected"), [
    ((1e-7,), [None]),  # exactly at the bound: not below it
    ((0.99e-7,), ["VANISHING"]),
    ((1e4,), [None]),
    ((1.01e4,), ["EXPLODING"]),
    ((None, 1e-5, 1.0, 2.0, 3.0), [None, "VANISHING", None, None, None]),  # no gradient: no ratio, no size flag
    # A median exactly at the explode bound still judges (a split: the 0.5 is the healthy side).
    ((1e4, 1e4, 1e4, 0.5), ["EXPLODING", "EXPLODING", "EXPLODING", None]),
])
def test_the_bounds_themselves(ratios, expected):
    params = rows(*ratios)
    judge_sizes(params, Thresholds(), median_ratio(params))
    assert [p.flags[0] if p.flags else None for p in params] == expected


@pytest.mark.parametrize(("ratios", "flag", "side"), [
    ((1.0, 2.0, 3.0, 1e-5), "VANISHING", "below"), ((1e-2, 2e-2, 3e-2, 500.0), "EXPLODING", "above"),
])
def test_a_ratio_far_from_a_median_in_the_band_says_how_far_and_the_median(ratios, flag, side):
    params = rows(*ratios)
    median = statistics.median(ratios)
    assert HEALTHY_LOW <= median <= HEALTHY_HIGH
    judge_sizes(params, Thresholds(), median_ratio(params))
    assert [(f.flag, f.reason) for f in params[-1].findings] == [
        (flag, f"‖grad‖/‖param‖ more than 10000x {side} the model's median {median:.2g}")]
