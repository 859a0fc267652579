"""The loss climbs, or never falls, with no nan: a trend over the run, reported once, with the
steps it covers.

The checked steps' losses are taken in windows of WINDOW; a window's median is robust to a
spike (spikes.py reports those). The finding: a window's median above CLIMB (10) times the
lowest window median before it, on CONFIRM windows in a row. Mini-batch noise moves a healthy
run's window medians by a few times at most (tests/watcher/test_watch_healthy.py measures it); the
forgotten zero_grad() of the tests climbs 2,800-fold. Judged only when one optimizer trains the
run and every loss is positive: a GAN's two losses pull against each other, and a WGAN's critic
loss is negative by design.

A loss that never falls (`loss_flat`, a warning): after FLAT_WINDOWS windows, none has a median
below FLAT (0.9) times the first window's. A run that learns nothing shows it (a learning rate
far too small, a model cut from its loss); so does fine-tuning a model that starts converged,
which is why it is a warning and does not fail the run.
"""

from __future__ import annotations

import math
import statistics

from .found import Found
from .protocol import CheckedStep, Detector

WINDOW = 10
CLIMB = 10.0
CONFIRM = 2
FLAT = 0.9
FLAT_WINDOWS = 10


class LossTrend(Detector):
    def __init__(self) -> None:
        self.values: list[float] = []
        self.first_step = 0
        self.windows: list[tuple[float, int, int]] = []  # (median, first step, last step)
        self.rising = 0
        self.off = False
        self.flat_told = False

    def check(self, step: CheckedStep) -> list[Found]:
        loss = step.reading.loss if step.reading is not None else None
        if self.off or loss is None:
            return []
        if not math.isfinite(loss) or loss <= 0 or len(step.run.watched) > 1:
            self.off = loss is not None and loss <= 0 or len(step.run.watched) > 1
            return []
        if not self.values:
            self.first_step = step.step
        self.values.append(loss)
        if len(self.values) < WINDOW:
            return []
        median = statistics.median(self.values)
        self.windows.append((median, self.first_step, step.step))
        self.values = []
        best = min(self.windows[:-1], default=None)
        if best is None or median <= CLIMB * best[0]:
            self.rising = 0
            return self._flat(step)
        self.rising += 1
        if self.rising < CONFIRM:
            return []
        self.off = True
        return [Found("loss_climbs", [], {"from": best[0], "from_steps": [best[1], best[2]], "to": median,
                                          "to_steps": [self.windows[-1][1], step.step], "times": median / best[0]},
                      at=step.step, site=step.run.backward_site)]

    def _flat(self, step: CheckedStep) -> list[Found]:
        first = self.windows[0]
        if self.flat_told or len(self.windows) < FLAT_WINDOWS:
            return []
        self.flat_told = True
        lowest = min(self.windows)
        if lowest[0] < FLAT * first[0]:
            return []
        return [Found("loss_flat", [], {"from": first[0], "from_steps": [first[1], first[2]], "to": lowest[0],
                                        "to_steps": [lowest[1], lowest[2]], "times": lowest[0] / first[0]},
                      at=step.step, site=step.run.backward_site)]
