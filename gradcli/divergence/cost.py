"""What the recorder costs a run, measured in the run itself: each step's wall time and the time
spent in the recorder's hooks during it (recorder.py writes both on every step's line), so the
report can say the cost per step against the script's own step. Nothing is run to measure it.

The first step is left out (it holds the first call's set-up: a compile, a cast, lazy imports).
The runs go side by side on the machine's cores, so a step's time is under that load.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from .runs import RunLog


@dataclass(frozen=True)
class RunCost:
    """Medians over the timed steps: the step with the recorder, and the recorder's part of it."""

    steps_timed: int
    step_seconds: float
    recorder_seconds: float

    @property
    def script_seconds(self) -> float:
        """The script's own step: the step without the recorder's hooks."""
        return max(self.step_seconds - self.recorder_seconds, 0.0)

    @property
    def overhead(self) -> float | None:
        """The recorder's time over the script's own step (0.2: the step costs 20% more)."""
        return self.recorder_seconds / self.script_seconds if self.script_seconds > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {"steps_timed": self.steps_timed, "step_seconds": self.step_seconds,
                "recorder_seconds": self.recorder_seconds, "script_seconds": self.script_seconds,
                "overhead": self.overhead}


def cost_of(log: RunLog) -> RunCost | None:
    """The run's cost (None: no step after the first was timed)."""
    timed = [s for s in log.steps[1:] if "seconds" in s]
    if not timed:
        return None
    return RunCost(len(timed), statistics.median(s["seconds"] for s in timed),
                   statistics.median(s["recorder_seconds"] for s in timed))
