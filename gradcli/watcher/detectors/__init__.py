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
`detectors()` below, and its test (tests/watcher/test_watch_silent.py shows the pattern: the bug's script and
its fixed twin, the truth from torch on the same loop).
"""

from __future__ import annotations

from ..rows.losses import LossNotes
from .carried import CarriedGradients
from .clip_scaled import ClipScaled
from .eval_mode import EvalMode
from .gradients import GradientHealth
from .identical import IdenticalUnits
from .learning_rate import LearningRate
from .loss_input import LossInput
from .loss_trend import LossTrend
from .outside import ChangedOutside
from .protocol import CheckedStep, Detector, Run, Stepped, graph_leaves
from .shifted_bias import ShiftedBias
from .unstepped import NoOptimizer
from .update_ratio import UpdateRatio
from .zeroed import ZeroedBeforeStep

__all__ = ["CheckedStep", "Detector", "Run", "Stepped", "detectors", "graph_leaves"]


def detectors() -> list[Detector]:
    """A fresh set for one run, in the order their findings are reported."""
    return [GradientHealth(), CarriedGradients(), ZeroedBeforeStep(), NoOptimizer(), LossInput(), EvalMode(),
            LearningRate(), UpdateRatio(), LossTrend(), ClipScaled(), ChangedOutside(), IdenticalUnits(), ShiftedBias(),
            LossNotes()]
