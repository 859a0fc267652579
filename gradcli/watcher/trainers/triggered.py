"""What the trainer callbacks share: a `Watch` the callback triggers at the trainer's own
"gradients are ready, the update is next" event, instead of at torch's step pre-hook.

Lightning calls `optimizer.step(closure)` and its closure runs forward and backward inside
`step`, so torch's pre-hook would see the previous step's gradients; under mixed precision
the gradients are unscaled only after backward. Both trainers have an event after backward
(and after unscaling) and before the update: Lightning's `on_before_optimizer_step`, the HF
Trainer's `on_pre_optimizer_step`. A stop raised there leaves the weights and the
optimizer's state as the previous step left them, as the pre-hook does.
"""

from __future__ import annotations

from typing import Any

from ...errors import UsageError
from ..options import WatchOptions
from ..result import WatchResult, WatchStop
from ..session import Watch


class TriggeredWatch:
    """One run's watch, opened at the trainer's start, checked at its pre-update event, closed at its end."""

    def __init__(self, who: str, options: dict[str, Any]) -> None:
        try:
            self.options = WatchOptions(**options)
        except TypeError as err:
            raise UsageError(f"{who}: {err}") from None
        self.watch: Watch | None = None
        self.result: WatchResult | None = None

    def open(self, root: Any = None) -> None:
        self.close()
        self.watch = Watch(self.options, triggered=True, root=root).__enter__()
        self.result = self.watch.result

    def check(self, optimizer: Any, scaler: Any = None) -> None:
        if self.watch is None:
            return
        try:
            self.watch.check_step(unwrapped(optimizer), scaler)
        except WatchStop:  # the hooks go with the run: not every trainer has an event for its exception
            self.close()
            raise

    def begin(self) -> None:
        """A new update begins: what ran since the last one (an evaluation) is not its step."""
        if self.watch is not None:
            self.watch.calls, self.watch.losses = [], []

    def pause(self, paused: bool) -> None:
        """An evaluation inside the fit: its model calls and losses are not the training step's."""
        if self.watch is not None:
            self.watch._paused = paused

    def close(self, finished: bool = False) -> None:
        if self.watch is not None:
            self.watch.result.finished = finished
            self.watch.close()
            self.watch = None


def unwrapped(optimizer: Any) -> Any:
    """The torch optimizer inside Lightning's LightningOptimizer or accelerate's AcceleratedOptimizer."""
    for _ in range(4):
        inner = getattr(optimizer, "_optimizer", None) or getattr(optimizer, "optimizer", None)
        if inner is None or inner is optimizer:
            break
        optimizer = inner
    return optimizer
