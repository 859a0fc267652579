"""The flags on each parameter, from its numbers and the thresholds (thresholds.py).

NO GRAD and ZERO reasons come from reasons.py; here the numbers speak: NONFINITE, and
VANISHING/EXPLODING against absolute bounds and against the model's median ratio.
"""

from __future__ import annotations

import math
import statistics

from .result import Finding, NonfiniteOrigin, ParamHealth
from .thresholds import Thresholds

#: The relative check needs a median that means something.
MIN_FOR_MEDIAN = 3


def median_ratio(params: list[ParamHealth]) -> float | None:
    """The median ‖grad‖/‖param‖ over parameters with a finite, non-zero gradient."""
    ratios = [r for p in params if (r := p.ratio) is not None and math.isfinite(r) and r > 0]
    return statistics.median(ratios) if len(ratios) >= MIN_FOR_MEDIAN else None


def yardstick(median: float | None, thresholds: Thresholds) -> float | None:
    """The median when it can judge the others: not when it is itself beyond the absolute
    bounds (in a vanishing MLP the healthy output-side biases would read as exploding)."""
    if median is None or not thresholds.vanish <= median <= thresholds.explode:
        return None
    return median


def size_findings(param: ParamHealth, thresholds: Thresholds, median: float | None) -> list[Finding]:
    """VANISHING or EXPLODING for one parameter with a finite, non-zero gradient."""
    r = param.ratio
    if r is None or not math.isfinite(r) or r == 0:
        return []
    median = yardstick(median, thresholds)
    # The sentence leaves the number to the table, so parameters alike share one finding.
    if r < thresholds.vanish:
        return [Finding("VANISHING", f"‖grad‖/‖param‖ below {thresholds.vanish:g}: an SGD step cannot change it")]
    if r > thresholds.explode:
        return [Finding("EXPLODING", f"‖grad‖/‖param‖ above {thresholds.explode:g}: one SGD step would dwarf the weights")]
    if median is not None and r < median / thresholds.spread:
        return [Finding("VANISHING", f"‖grad‖/‖param‖ more than {thresholds.spread:g}x below the model's median {median:.2g}")]
    if median is not None and r > median * thresholds.spread:
        return [Finding("EXPLODING", f"‖grad‖/‖param‖ more than {thresholds.spread:g}x above the model's median {median:.2g}")]
    return []


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
    if origin is not None and origin.forward_op is not None and source is not None and origin.forward_source == source:
        words += f" (forward's {origin.forward_op} on that line already gave nan/inf)"
    elif origin is not None and origin.forward_op is not None:
        words += f"; forward first produced nan/inf in {origin.forward_op}"
        if origin.forward_source is not None:
            words += f" at {origin.forward_source}"
            source = source or origin.forward_source
        elif origin.forward_in_loss:
            words += " in the loss"
    return Finding("NONFINITE", words, source)
