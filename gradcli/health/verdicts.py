"""The flags on each parameter, from its numbers and the thresholds (thresholds.py).

NO GRAD and ZERO reasons come from reasons.py; here the numbers speak: NONFINITE, and
VANISHING/EXPLODING against absolute bounds and against the model's median ratio. When the
median is outside the healthy band and some parameters far from it are inside, the median's
side is the one off (a Split): the others are judged against the band, not the median.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .result import Finding, NonfiniteOrigin, ParamHealth
from .thresholds import HEALTHY_HIGH, HEALTHY_LOW, Thresholds

#: The relative check needs a median that means something.
MIN_FOR_MEDIAN = 3


def median_ratio(params: list[ParamHealth]) -> float | None:
    """The median ‖grad‖/‖param‖ over parameters with a finite, non-zero gradient (their ratio
    may still be 0: below float64's range, ‖grad‖ 1e-320 over ‖param‖ 1e10)."""
    ratios = [r for p in params if (r := p.ratio) is not None and math.isfinite(r) and r >= 0]
    return statistics.median(ratios) if len(ratios) >= MIN_FOR_MEDIAN else None


def yardstick(median: float | None, thresholds: Thresholds) -> float | None:
    """The median when it can judge the others: not when it is itself beyond the absolute
    bounds (in a vanishing MLP the healthy output-side biases would read as exploding)."""
    if median is None or not thresholds.vanish <= median <= thresholds.explode:
        return None
    return median


@dataclass(frozen=True)
class Split:
    """The model split in two: its median outside the healthy band, and `anchors` (names, in
    forward order) more than `spread` away from it yet inside the band. Healthy models have
    every parameter in the band, so the median's side is the one off: below the band when the
    anchors are above (`above`: those parameters vanish), over it when they are below."""

    anchors: tuple[str, ...]
    above: bool
    median: float


def find_split(params: list[ParamHealth], thresholds: Thresholds, median: float | None) -> Split | None:
    """The Split of these parameters, or None when the median is in the band or nothing far
    from it is (then the median judges, as before)."""
    median = yardstick(median, thresholds)
    if median is None or HEALTHY_LOW <= median <= HEALTHY_HIGH:
        return None
    above = median < HEALTHY_LOW
    low, high = max(HEALTHY_LOW, thresholds.vanish), min(HEALTHY_HIGH, thresholds.explode)
    anchors = tuple(
        p.name for p in params
        if (r := _ratio(p)) is not None and low <= r <= high
        and (r > median * thresholds.spread if above else r < median / thresholds.spread)
    )
    return Split(anchors, above, median) if anchors else None


def size_findings(
    param: ParamHealth, thresholds: Thresholds, median: float | None, split: Split | None = None,
) -> list[Finding]:
    """VANISHING or EXPLODING for one parameter with a finite, non-zero gradient."""
    r = _ratio(param)
    if r is None:
        return []
    median = yardstick(median, thresholds)
    # The sentence leaves the number to the table, so parameters alike share one finding.
    if r < thresholds.vanish:
        return [Finding("VANISHING", f"‖grad‖/‖param‖ below {thresholds.vanish:g}: an SGD step cannot change it")]
    if r > thresholds.explode:
        return [Finding("EXPLODING", f"‖grad‖/‖param‖ above {thresholds.explode:g}: one SGD step would dwarf the weights")]
    if split is not None and param.name in split.anchors:
        return []
    if split is not None and split.above and r < HEALTHY_LOW:
        return [Finding("VANISHING", _split_words(split, thresholds))]
    if split is not None and not split.above and r > HEALTHY_HIGH:
        return [Finding("EXPLODING", _split_words(split, thresholds))]
    if median is not None and r < median / thresholds.spread:
        return [Finding("VANISHING", f"‖grad‖/‖param‖ more than {thresholds.spread:g}x below the model's median {median:.2g}")]
    if median is not None and r > median * thresholds.spread:
        return [Finding("EXPLODING", f"‖grad‖/‖param‖ more than {thresholds.spread:g}x above the model's median {median:.2g}")]
    return []


def judge_sizes(params: list[ParamHealth], thresholds: Thresholds, median: float | None) -> None:
    """Add VANISHING/EXPLODING findings to `params` (the ones without another flag)."""
    split = find_split(params, thresholds, median)
    for p in params:
        p.findings += size_findings(p, thresholds, median, split)


def _ratio(param: ParamHealth) -> float | None:
    """The ratio to judge by size: inf included (a finite gradient whose norm overflows,
    run._finite), 0 too (an all-zero gradient is ZERO and never sized, so a 0 here is a ratio
    below float64's range), nan never."""
    r = param.ratio
    return r if r is not None and r >= 0 and not math.isnan(r) else None


def _split_words(split: Split, thresholds: Thresholds) -> str:
    """One sentence for the whole side, so its parameters share one finding."""
    side = "under" if split.above else "over"
    names = list(split.anchors[:3]) + ([f"{len(split.anchors) - 3} more"] if len(split.anchors) > 3 else [])
    named = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
    one = len(split.anchors) == 1
    why = ("the loss barely depends on it" if split.above
           else f"a step that suits {'it' if one else 'them'} would dwarf these weights")
    return (f"‖grad‖/‖param‖ {side} the healthy band ({HEALTHY_LOW:g} to {HEALTHY_HIGH:g}), as the model's median "
            f"{split.median:.2g} is, more than {thresholds.spread:g}x {side} {named}, which {'is' if one else 'are'} "
            f"in the band: {why}")


def nonfinite_finding(param: ParamHealth, origin: NonfiniteOrigin | None) -> Finding:
    kind = "nan" if param.grad_norm is not None and math.isnan(param.grad_norm) else "inf"
    words = f"{kind} in its gradient"
    source = None
    if origin is not None and origin.backward_node is not None:
        words += f"; the first non-finite gradient came from {origin.backward_node}"
        source = origin.backward_source
        if source is not None:
            words += f" at {source}"
        elif origin.backward_in_loss:
            words += " in the loss"
    if origin is not None and origin.nan_op is not None:
        return _born_later(words, origin)
    if origin is not None and origin.forward_op is not None and source is not None and origin.forward_source == source:
        words += f" (forward's {origin.forward_op} on that line already gave nan/inf)"
    elif origin is not None and origin.forward_op is not None:
        words += f"; forward first produced nan/inf in {origin.forward_op}"
        if origin.forward_source is not None:  # (made in the loss, forward_op is "the loss" itself)
            words += f" at {origin.forward_source}"
            source = source or origin.forward_source
    return Finding("NONFINITE", words, source)


def nonfinite_loss_finding(loss: float, origin: NonfiniteOrigin | None) -> Finding:
    """The loss itself is nan or inf while no gradient is (a gradient's NONFINITE would say
    it): `out.sum() + 1e39` in float32 is inf with gradients of ones. A loss that is not a
    number is no training signal, whatever its gradients hold."""
    words = f"the loss is {loss}"
    if origin is not None and origin.forward_op is not None and not origin.forward_in_loss:
        words += f"; forward first produced {origin.forward_kind or 'nan/inf'} in {origin.forward_op}"
        if origin.forward_source is not None:
            words += f" at {origin.forward_source}"
        return Finding("NONFINITE", words, origin.forward_source)
    if origin is not None and origin.forward_in_loss:
        words += "; forward's output is finite: the loss made it"
    return Finding("NONFINITE", words)


def _born_later(words: str, origin: NonfiniteOrigin) -> Finding:
    """Forward made an inf first and the nan later (issue 24: masked_fill(-inf), then softmax
    of a fully masked row): the nan's line is the origin; the inf is said for what it is."""
    if not origin.forward_written:
        inf = origin.forward_kind or "an inf"
    elif origin.forward_source is not None:
        inf = "your own -inf constant (not an overflow)"
    else:  # written by torch's code for you (nn.MultiheadAttention's key_padding_mask)
        inf = "a -inf constant torch wrote (not an overflow)"
    at = f" at {origin.forward_source}" if origin.forward_source is not None else ""
    nan_at = f" at {origin.nan_source}" if origin.nan_source is not None else ""
    words += f"; forward first produced {inf} in {origin.forward_op}{at}, and the nan is born in {origin.nan_op}{nan_at}"
    if origin.nan_masked_rows:
        rows = origin.nan_masked_rows
        words += (f": {rows:,} row{'s' if rows != 1 else ''} of its input {'are' if rows != 1 else 'is'} -inf "
                  "throughout, and softmax of such a row is exp(-inf - (-inf)) = 0/0")
    if origin.fixes:
        from ..verify.causes.masked_rows import fixes_sentence

        words += "; " + fixes_sentence(origin.fixes)
    return Finding("NONFINITE", words, origin.nan_source or origin.forward_source)
