"""`gradcli.callbacks.LightningCallback`: watch inside Lightning's `Trainer.fit`.

Checks in `on_before_optimizer_step`, which Lightning calls after backward and after the
GradScaler's unscaling (precision="16-mixed"), before gradient clipping and the update; with
`accumulate_grad_batches` it comes once per update, after the last micro-batch. A stop prints
the report `gradcli watch` prints to stderr and raises `gradcli.WatchStop` out of
`trainer.fit(...)` (Lightning re-raises a callback's exception after its own teardown); a fit
that ends without a stop prints its findings once, at `on_fit_end`. `callback.result` holds
the same `WatchResult` either way. Under `gradcli watch` or inside `with gradcli.watch():` the
callback joins that watch and prints nothing of its own (watcher/trainers/triggered.py).
The step log (loss, gradient norm, each layer's norm, the spike statistic) goes to
`trainer.logger` every `log_every_n_steps` checked steps, findings as text (watcher/trackers.py).
"""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

from ..watcher.trainers.steps import LightningSteps
from ..watcher.trainers.triggered import TriggeredWatch
from ..watcher.trackers import LightningTracker
from .report import report


class LightningCallback(Callback):
    """Lightning callback: every optimizer step checked before it is applied (gradcli.watch's options)."""

    def __init__(self, **options: Any) -> None:
        self._watch = TriggeredWatch("LightningCallback", options, report)

    @property
    def result(self) -> Any:
        """The last fit's WatchResult (None before a fit)."""
        return self._watch.result

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        tracker = LightningTracker(trainer) if getattr(trainer, "logger", None) is not None else None
        self._watch.open(root=pl_module, steps=LightningSteps(trainer, pl_module), tracker=tracker)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._watch.steps is not None:  # a loss computed in training_step is replayed from it at a stop
            self._watch.steps.add(batch, batch_idx)  # type: ignore[attr-defined]

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._watch.check(optimizer, getattr(trainer.precision_plugin, "scaler", None))

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._watch.pause(True)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._watch.pause(False)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._watch.close(finished=True)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._watch.close()
