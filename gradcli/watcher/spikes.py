"""Loss and gradient-norm spikes: a robust z-score over a window of checked steps.

z = (log x - median) / (1.4826 * MAD), the median and the median absolute deviation of log x
taken over the last `window` values before x (1.4826 makes the MAD a standard deviation for
normal noise). On a log scale because a loss near convergence wanders by factors (Adam's MLP in
the tests goes from 7.6e-5 to 6e-4 and back at step 169 of 300): its spread is relative, and
so is a spike; a value that is not positive is not judged. Median and MAD, not mean and standard deviation: a spike must not raise the yardstick
it is measured against, and a run's slow trend moves the median only slowly. A value is a
spike when it is more than `ratio` (3) times the median AND either z exceeds `threshold` (8)
or it is more than HUGE (100) times the median:
mini-batch noise of a healthy run has heavy tails (the largest |z| of the healthy runs in
tests/watcher/test_watch_runs.py, measured: 6.0 for the MLP with Adam over 300 steps, 2.7 for the CNN,
3.5 for the Transformer LM), while a corrupted batch or a learning-rate jump multiplies the
value by orders of magnitude (the one-batch label spike of the tests multiplies the loss by
4e4, at z = 10.5: early in a run the loss falls fast and the window's spread is wide, which
is what the HUGE rule is for). No verdict before the window holds MIN_VALUES values.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

#: Values the window must hold before a verdict.
MIN_VALUES = 8
#: A value this many times the window's median is a spike whatever the spread.
HUGE = 100.0


@dataclass
class Spike:
    value: float
    median: float
    z: float


class SpikeDetector:
    """`scored`: compute z for every value (last_z, for --log); otherwise only for a value above
    `ratio` times the median, the only ones z can make a spike (precursors.py keeps one per
    layer: the median absolute deviation's sort is then skipped on ordinary steps)."""

    def __init__(self, window: int, threshold: float, ratio: float, scored: bool = True) -> None:
        self.values: deque[float] = deque()  # the window's logs, oldest first
        self.ordered: list[float] = []  # the same, sorted (kept so: one per layer is judged every check)
        self.window = window
        self.threshold, self.ratio, self.scored = threshold, ratio, scored
        self.last_z: float | None = None

    def add(self, value: float | None) -> Spike | None:
        """Judge `value` against the window, then add it (a spike is kept out of the window,
        so that one bad batch does not hide the next)."""
        self.last_z = None
        if value is None or not math.isfinite(value) or value <= 0:
            return None
        log = math.log(value)
        spike = None
        if len(self.values) >= MIN_VALUES:
            ordered = self.ordered
            median = _middle(ordered)
            above = log - median
            if self.scored or above > math.log(self.ratio):
                z = (log - median) / max(1.4826 * _middle(sorted(abs(v - median) for v in ordered)), 1e-3)
                self.last_z = z
                if above > math.log(self.ratio) and (z > self.threshold or above > math.log(HUGE)):
                    spike = Spike(value, math.exp(median), z)
        if spike is None and self.window > 0:
            if len(self.values) == self.window:
                oldest = self.values.popleft()
                del self.ordered[bisect.bisect_left(self.ordered, oldest)]
            self.values.append(log)
            bisect.insort(self.ordered, log)
        return spike


def _middle(ordered: list[float]) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
