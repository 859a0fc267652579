"""What the trainer callbacks share: a `Watch` the callback triggers at the trainer's own
"gradients are ready, the update is next" event, instead of at torch's step pre-hook.

Lightning calls `optimizer.step(closure)` and its closure runs forward and backward inside
`step`, so torch's pre-hook would see the previous step's gradients; under mixed precision
the gradients are unscaled only after backward. Both trainers have an event after backward
(and after unscaling) and before the update: Lightning's `on_before_optimizer_step`, the HF
Trainer's `on_pre_optimizer_step`. A stop raised there leaves the weights and the
optimizer's state as the previous step left them, as the pre-hook does.

One watch per run: a callback inside a watch already installed (the script runs under
`gradcli watch`, or the fit sits in `with gradcli.watch():`) joins that watch rather than
installing a second one. Two watches would each count the steps, and the outer one would
take the inner one's `WatchStop` for its own and report a false all-clear. Joined, the
callback's event checks the outer watch's step, the stop is the outer watch's result, and
the outer watch's options (`--save`, `--log`, ...) apply; the callback's own are unused.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

from ...errors import UsageError
from ..options import WatchOptions
from ..result import WatchResult, WatchStop
from ..session import Watch, current
from .steps import Steps

#: How a callback (named) shows a result where the user looks (gradcli/callbacks/report.py): the
#: library never prints, so the callbacks hand it in.
Report = Callable[[str, WatchResult], None]
#: The watches the callbacks installed themselves: one still installed when a run begins was
#: left by a run that raised (the HF Trainer has no event for an exception), not a watch to join.
_OWN: "weakref.WeakSet[Watch]" = weakref.WeakSet()


class TriggeredWatch:
    """One run's watch, opened at the trainer's start, checked at its pre-update event, closed at its end."""

    def __init__(self, who: str, options: dict[str, Any], report: Report | None = None) -> None:
        try:
            self.options = WatchOptions(**options)
        except TypeError as err:
            raise UsageError(f"{who}: {err}") from None
        self.who = who
        self.report = report
        self.watch: Watch | None = None
        self.result: WatchResult | None = None
        self._leave: Callable[[], None] | None = None  # set when joined to a watch installed around the fit
        self.steps: Steps | None = None  # the trainer's loss code, to run again at a stop (steps.py)
        self._untrack: Callable[[], None] | None = None

    def open(self, root: Any = None, steps: Steps | None = None, tracker: Any = None) -> None:
        """`steps`: the trainer's loss code for a stop (steps.py); `tracker`: the trainer's own
        logger, which gets the step log (trackers.py)."""
        self.close()
        outer = current()
        while outer is not None and outer in _OWN:
            outer.close()
            outer = current()
        if outer is not None:
            self._leave = outer.join(root)
            self.watch = outer
        else:
            self.watch = Watch(self.options, triggered=True, root=root).__enter__()
            _OWN.add(self.watch)
        self.result = self.watch.result
        self.steps = steps
        self.watch.loss_replay = steps.replay if steps is not None else None
        self._untrack = self.watch.track(tracker) if tracker is not None else None

    def check(self, optimizer: Any, scaler: Any = None) -> None:
        if self.watch is None:
            return
        try:
            self.watch.check_step(unwrapped(optimizer), scaler)
        except WatchStop:  # the hooks go with the run: not every trainer has an event for its exception
            self.close()
            raise
        if self.steps is not None:
            self.steps.clear()

    def begin(self) -> None:
        """A new update begins: what ran since the last one (an evaluation) is not its step."""
        if self.watch is not None:
            self.watch.calls, self.watch.losses = [], []
        if self.steps is not None:
            self.steps.clear()

    def pause(self, paused: bool) -> None:
        """An evaluation inside the fit: its model calls and losses are not the training step's."""
        if self.watch is not None:
            self.watch._paused = paused

    def close(self, finished: bool = False) -> None:
        """The fit ended (finished), was stopped, or raised: the hooks go and the result is
        shown once. A joined watch stays installed and is not shown: its owner has it (the
        `gradcli watch` command prints its report; a `with gradcli.watch()` has `.result`,
        and the `WatchStop` that leaves the fit says the stop in its message)."""
        watch = self.watch
        if watch is None:
            return
        self.watch = None
        watch.loss_replay = None
        if self._untrack is not None:
            self._untrack()
            self._untrack = None
        if self.steps is not None:
            self.steps.detach()
            self.steps = None
        if self._leave is not None:
            self._leave()
            self._leave = None
            return
        watch.result.finished = finished
        watch.close()
        if self.report is not None and (finished or watch.result.stop is not None):
            self.report(self.who, watch.result)


def unwrapped(optimizer: Any) -> Any:
    """The torch optimizer inside Lightning's LightningOptimizer or accelerate's AcceleratedOptimizer."""
    for _ in range(4):
        inner = getattr(optimizer, "_optimizer", None) or getattr(optimizer, "optimizer", None)
        if inner is None or inner is optimizer:
            break
        optimizer = inner
    return optimizer
