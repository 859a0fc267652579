"""`gradcli.callbacks.TrainerCallback`: watch inside Hugging Face's `Trainer.train`.

Checks in `on_pre_optimizer_step`, which the Trainer calls after backward and gradient
clipping, just before `optimizer.step()`. The Trainer's default `logging_nan_inf_filter`
logs a running mean in place of a nan loss while the update still applies; the check reads
the loss `backward` ran on and the gradients themselves, so the filter hides nothing from it.
A stop prints the report `gradcli watch` prints to stderr and raises `gradcli.WatchStop` out
of `trainer.train()`; a run that ends without a stop prints its findings once, at
`on_train_end`; `callback.result` holds the same `WatchResult`. Under `gradcli watch` or inside
`with gradcli.watch():` the callback joins that watch and prints nothing of its own. Under
fp16 the optimizer's GradScaler (accelerate keeps it on the optimizer) makes a non-finite
gradient under a finite loss a skipped step, counted.

A nan born in the loss the Trainer computes (a `compute_loss_func`, a label smoother, a
subclass's `compute_loss`) is located by running `trainer.compute_loss` again on the stopped
micro-batches (watcher/trainers/steps.py). The Trainer does not pass itself to its callbacks:
the callback finds it as the `self` of the `Trainer` method that calls `on_train_begin`.
The step log's latest numbers join the Trainer's own logs in `on_log` (its `logging_steps`), so
that `report_to` sends them to TensorBoard or W&B (watcher/trackers.py).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback as _HFCallback

from ..watcher.trainers.steps import TrainerSteps
from ..watcher.trainers.triggered import TriggeredWatch
from ..watcher.trackers import LatestTracker
from .report import report


class TrainerCallback(_HFCallback):
    """transformers callback: every optimizer step checked before it is applied (gradcli.watch's options)."""

    def __init__(self, **options: Any) -> None:
        self._watch = TriggeredWatch("TrainerCallback", options, report)
        self._latest: LatestTracker | None = None

    @property
    def result(self) -> Any:
        """The last run's WatchResult (None before a run)."""
        return self._watch.result

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        trainer = _calling_trainer()
        self._latest = LatestTracker()
        self._watch.open(root=model, steps=TrainerSteps(trainer) if trainer is not None else None, tracker=self._latest)
        if trainer is not None:
            self._watch.steps.attach()  # type: ignore[union-attr]
            handler = trainer.callback_handler.callbacks  # first, so that report_to's callbacks see the numbers
            if self in handler:
                handler.remove(self)
                handler.insert(0, self)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        """The latest checked step's numbers into the Trainer's logs (`report_to` sends them on),
        and how many findings were made since the last log."""
        if logs is None or getattr(self, "_latest", None) is None:
            return
        numbers, findings = self._latest.take()
        logs.update(numbers)
        if findings:
            logs["gradcli/findings"] = len(findings)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._watch.begin()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, optimizer: Any = None, **kwargs: Any) -> None:
        self._watch.check(optimizer, getattr(optimizer, "scaler", None))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._watch.close(finished=True)


def _calling_trainer() -> Any:
    """The `transformers.Trainer` whose method is calling this event (its `self`), if any."""
    import sys

    from transformers import Trainer

    frame = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            break
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None
