"""The trainers' own loss code, run again for a stopped step: Lightning's `training_step` and the
HF Trainer's `compute_loss` (which calls a `compute_loss_func`, a label smoother, or takes the
loss the model returned).

The watch replays the model's top-level calls (replay.py); a loss written outside the model's
modules, in `training_step` or in a `compute_loss_func`, is not among them, and the report said
only "in the loss". A trainer's callback knows each micro-batch of the update in progress: it
keeps the batch (Lightning's `on_train_batch_start`; for the HF Trainer, the arguments of each
`compute_loss` call, seen by wrapping that method on the trainer) and the random state before
it, so that at a stop replay.py's `replay_loss` can compute the loss again under the recorder.
Each run restores the random state (dropout draws the same masks), enters the trainer's
precision context (autocast) and puts the buffers back afterwards.

XXX the random state kept is the CPU generator's, as for the model's calls (session.py): a
replay of a GPU run draws other dropout masks.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, Mapping

import torch

from ..calls import buffers_restored
from ..replay import replay_loss
from ..result import Stop


class Steps:
    """The micro-batches of the update in progress, each a way to compute its loss again."""

    what = "the loss"

    def __init__(self) -> None:
        self.runs: list[Callable[[], torch.Tensor]] = []

    def clear(self) -> None:
        self.runs = []

    def detach(self) -> None:
        """The run ended: undo what `attach` did to the trainer (nothing here)."""
        self.runs = []

    def replay(self, stop: Stop, params: dict[str, torch.Tensor], names: dict[int, str]) -> None:
        """Watch.loss_replay: the update's micro-batches, latest first (the stop came at its end)."""
        replay_loss(stop, list(reversed(self.runs)), params, names, self.what)


class LightningSteps(Steps):
    """`pl_module.training_step(batch, batch_idx)` on each micro-batch, in the strategy's precision context."""

    what = "training_step"

    def __init__(self, trainer: Any, module: Any) -> None:
        super().__init__()
        self.trainer, self.module = trainer, module

    def add(self, batch: Any, index: int) -> None:
        rng = torch.get_rng_state()
        self.runs.append(lambda: self._run(batch, index, rng))

    def _run(self, batch: Any, index: int, rng: torch.Tensor) -> torch.Tensor:
        strategy = getattr(self.trainer, "strategy", None)
        precision = getattr(strategy, "precision_plugin", None) or getattr(self.trainer, "precision_plugin", None)
        context = precision.train_step_context() if precision is not None else nullcontext()
        with torch.random.fork_rng(devices=[]), buffers_restored([self.module]), context:
            torch.random.set_rng_state(rng)
            return loss_of(self.module.training_step(batch, index))


class TrainerSteps(Steps):
    """`trainer.compute_loss(model, inputs, ...)` on each micro-batch, in the Trainer's autocast."""

    what = "compute_loss"

    def __init__(self, trainer: Any) -> None:
        super().__init__()
        self.trainer = trainer
        self._compute = None

    def attach(self) -> None:
        """Wrap the trainer's `compute_loss` (an instance attribute, removed by detach) to keep each call."""
        if self._compute is not None:
            return
        compute = self._compute = self.trainer.compute_loss
        steps = self

        def compute_loss(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            if torch.is_grad_enabled() and model.training:
                # compute_loss pops the labels from `inputs` when it computes the loss itself: keep a copy
                rng, kept = torch.get_rng_state(), dict(inputs)
                steps.runs.append(lambda: steps._run(model, kept, args, kwargs, rng))
            return compute(model, inputs, *args, **kwargs)

        self.trainer.compute_loss = compute_loss

    def detach(self) -> None:
        self.runs = []
        if self._compute is not None:
            self.trainer.__dict__.pop("compute_loss", None)
            self._compute = None

    def _run(self, model: Any, inputs: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
             rng: torch.Tensor) -> torch.Tensor:
        autocast = getattr(self.trainer, "autocast_smart_context_manager", None)
        kwargs = {k: v for k, v in kwargs.items() if k != "return_outputs"}
        with torch.random.fork_rng(devices=[]), buffers_restored([model]), (autocast() if autocast else nullcontext()):
            torch.random.set_rng_state(rng)
            return loss_of(self._compute(model, dict(inputs), *args, **kwargs))  # type: ignore[misc]


def loss_of(out: Any) -> torch.Tensor:
    """The loss in what a training step returns: the tensor, a mapping's "loss", or a tuple's first."""
    if isinstance(out, Mapping):
        out = out["loss"]
    elif isinstance(out, (tuple, list)):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the step returned {type(out).__name__}, not a loss tensor")
    return out
