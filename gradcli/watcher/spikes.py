"""Loss and gradient-norm spikes: a robust z-score over a window of checked steps.

z = (x - median) / (1.4826 * MAD), the median and the median absolute deviation taken over
the last `window` values before x (1.4826 makes the MAD a standard deviation for normal
noise). Median and MAD, not mean and standard deviation: a spike must not raise the yardstick
it is measured against, and a run's slow trend moves the median only slowly. A value is a
spike when z exceeds `threshold` AND it is more than `ratio` times the median: mini-batch
noise of a healthy run has heavy tails (z reached 6.7 on the healthy runs in
tests/test_watch_runs.py), while a corrupted batch or a learning-rate jump multiplies the
value. No verdict before the window holds MIN_VALUES values.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

#: Values the window must hold before a verdict.
MIN_VALUES = 8


@dataclass
class Spike:
    value: float
    median: float
    z: float


class SpikeDetector:
    def __init__(self, window: int, threshold: float, ratio: float) -> None:
        self.values: deque[float] = deque(maxlen=window)
        self.threshold, self.ratio = threshold, ratio
        self.last_z: float | None = None

    def add(self, value: float | None) -> Spike | None:
        """Judge `value` against the window, then add it (a spike is kept out of the window,
        so that one bad batch does not hide the next)."""
        if value is None or not math.isfinite(value):
            self.last_z = None
            return None
        spike = None
        self.last_z = None
        if len(self.values) >= MIN_VALUES:
            median, mad = _median_mad(self.values)
            scale = 1.4826 * mad or abs(median) * 1e-3 or 1e-12
            z = (value - median) / scale
            self.last_z = z
            if z > self.threshold and value > self.ratio * abs(median):
                spike = Spike(value, median, z)
        if spike is None:
            self.values.append(value)
        return spike


def _median_mad(values: deque[float]) -> tuple[float, float]:
    ordered = sorted(values)
    median = _middle(ordered)
    return median, _middle(sorted(abs(v - median) for v in ordered))


def _middle(ordered: list[float]) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
