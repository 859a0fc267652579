"""The silent training bugs, one detector a module, behind one small protocol.

A detector is told of four moments of a watched run and answers with findings (found.py):

- `backward(run, roots)`: backward is about to run on `roots` (the graph is whole, its saved
  tensors alive, the `.grad` tensors as the last step left them); `backward_done(run)` after it;
- `check(step)`: an optimizer's step is about to be applied (gradients final; the check has read
  the loss and every gradient's norm once: `step.reading`); returns its findings;
- `applied(step)`: that step was applied;
- `end(run)`: the run is over; returns what only the whole run shows.

Each is a no-op unless the detector overrides it, and each must ride on what the check already
has (the norms, `param_groups`, module modes, the first step's graph) or run rarely: watch's cost
per step is measured by bench/watch.py. How a step is caught (the optimizer's pre-hook, an LBFGS
closure, a GradScaler, a trainer's callback) is session.py's business, not a detector's.

Adding one: a module here with a `Detector` subclass, its kind and words in kinds.py, its name in
DETECTORS below, and its test (tests/test_watch_silent.py shows the pattern: the bug's script and
its fixed twin, the truth from torch on the same loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..found import Found
from ..reading import StepReading

if TYPE_CHECKING:
    from ..session import Watch, Watched


@dataclass
class CheckedStep:
    """One optimizer's step, about to be applied (or just applied)."""

    run: "Watch"  # the watch: its models (tops), names, events, the step's losses and backward line
    optimizer: torch.optim.Optimizer
    watched: "Watched"  # its label, step count, checks
    params: list[torch.Tensor]  # the optimizer's parameters that require grad, in its order
    names: list[str]  # theirs, as named_parameters() gives them
    reading: StepReading | None  # the check's numbers (None in `applied` of an unchecked step)

    @property
    def step(self) -> int:
        return self.watched.steps


class Detector:
    """The protocol: override what the detector needs."""

    def backward(self, run: "Watch", roots: list[torch.Tensor]) -> None:
        return None

    def backward_done(self, run: "Watch") -> None:
        return None

    def check(self, step: CheckedStep) -> list[Found]:
        return []

    def applied(self, step: CheckedStep) -> None:
        return None

    def end(self, run: "Watch") -> list[Found]:
        return []


def detectors() -> list[Detector]:
    """A fresh set for one run, in the order their findings are reported."""
    from .carried import CarriedGradients
    from .eval_mode import EvalMode
    from .learning_rate import LearningRate
    from .loss_input import LossInput
    from .loss_trend import LossTrend
    from .shifted_bias import ShiftedBias
    from .update_ratio import UpdateRatio
    from .unstepped import NoOptimizer
    from .zeroed import ZeroedBeforeStep

    return [CarriedGradients(), ZeroedBeforeStep(), NoOptimizer(), LossInput(), EvalMode(), LearningRate(),
            UpdateRatio(), LossTrend(), ShiftedBias()]


def graph_leaves(roots: list[Any]) -> list[torch.Tensor]:
    """The leaves backward reaches from `roots` (their AccumulateGrad nodes' variables)."""
    from ...graph.nodes import grad_fn_nodes

    return [n.variable for n in grad_fn_nodes([getattr(r, "grad_fn", None) for r in roots])
            if hasattr(n, "variable")]
