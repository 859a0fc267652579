"""What a watched run checks and how often: one frozen record, filled by the CLI or by
`gradcli.watch(model, optimizer, **options)`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import UsageError

StopOn = Literal["nonfinite", "spike"]


@dataclass(frozen=True)
class WatchOptions:
    every: int = 1  # check every N-th optimizer step (each optimizer counts its own)
    health_every: int = 100  # grads' vanishing/exploding verdicts every M-th checked step (0: never)
    window: int = 50  # the spike statistic's window, in checked steps
    spike: float = 8.0  # a spike is a robust z-score above this ... (spikes.py says why)
    spike_ratio: float = 3.0  # ... and a value above this many times the window's median
    adam_ratio: float = 30.0  # a layer's g² over Adam's second moment above this is a warning (precursors.py)
    stop_on: tuple[StopOn, ...] = ("nonfinite",)
    replay: bool = True  # replay the bad step to find the origin and cause
    log: Path | None = None  # JSON lines, one per checked step
    save: Path | None = None  # a replay bundle of the stopped step
    tensorboard: Path | None = None  # the step log as TensorBoard event files (trackers.py)
    skips: int = 8  # a GradScaler's skipped steps in a row that make a stop (its scale fell 2**skips-fold)

    def __post_init__(self) -> None:
        if self.every < 1:
            raise UsageError(f"--every must be 1 or more, not {self.every}")
        if self.health_every < 0:
            raise UsageError(f"--health-every must be 0 (never) or more, not {self.health_every}")
        if self.window < 5:
            raise UsageError(f"--window must be 5 or more checked steps, not {self.window}")
        if self.skips < 2:
            raise UsageError(f"--skips must be 2 or more (a GradScaler's first step is skipped), not {self.skips}")
        if not self.spike > 0 or not self.spike_ratio > 1:
            raise UsageError("--spike must be positive and the spike ratio above 1")
        if not self.adam_ratio > 1:
            raise UsageError(f"--adam-ratio must be above 1 (a steady run's ratio is about 1), not {self.adam_ratio}")
        unknown = [s for s in self.stop_on if s not in ("nonfinite", "spike")]
        if unknown:
            raise UsageError(f"--stop-on takes nonfinite or spike, not {', '.join(unknown)}")
