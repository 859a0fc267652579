"""The y range a plot shows: all values, unless a few huge ones would flatten the rest.

1/x near 0 or a derivative that blows up at a domain edge would otherwise make every other
value a flat line. Both renderers use the same rule, so the picture and the terminal agree.
"""

from __future__ import annotations

import numpy as np

#: Past this ratio of the full range to the 1st-99th percentile range, the range is clipped.
CLIP_RATIO = 20.0
#: Padding added around the shown range, as a fraction of it.
PAD = 0.05


def value_range(arrays: list[np.ndarray]) -> tuple[float, float, bool] | None:
    """(low, high, clipped) covering the finite values of `arrays`; None if there are none."""
    finite = [a[np.isfinite(a)] for a in arrays]
    values = np.concatenate(finite) if finite else np.array([])
    if values.size == 0:
        return None
    low, high = float(values.min()), float(values.max())
    clipped = False
    if values.size >= 10:
        p_low, p_high = (float(v) for v in np.percentile(values, [1, 99]))
        if p_high > p_low and (high - low) > CLIP_RATIO * (p_high - p_low):
            low, high, clipped = p_low, p_high, True
    if high == low:
        half = max(abs(high) * 0.1, 1.0)
        return low - half, high + half, clipped
    pad = PAD * (high - low) * (3 if clipped else 1)
    return low - pad, high + pad, clipped
