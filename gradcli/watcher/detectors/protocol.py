"""The detectors' protocol: what a detector is told of a watched run, and what it reads of it
(the package's docstring says how a detector is written)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ContextManager, Protocol

import torch

from ..calls import Call
from ..events import OpSites, RunEvents
from ..names import Names
from ..options import WatchOptions
from ..reading import StepReading, local  # noqa: F401 - the detectors import local from here
from .found import Found


class Stepped(Protocol):
    """One optimizer as the run knows it (session.py's Watched)."""

    label: str
    steps: int
    checks: int
    reported: set[tuple[str, str]]
    zeros: dict[str, int]


class Run(Protocol):
    """What a detector reads of the watched run (session.py's Watch is one)."""

    options: WatchOptions
    tops: dict[int, torch.nn.Module]  # the models found (id -> module)
    names: Names
    events: RunEvents
    opsites: OpSites | None  # the first step's op lines (None after it)
    losses: list[torch.Tensor]  # the roots backward ran on since the last step
    backward_site: tuple[str, int] | None  # the user's line of the last backward()
    pending: list[Found]  # findings made at a backward, reported at the next check
    watched: dict[int, Any]  # id(optimizer) -> its Stepped
    calls: list[Call]  # the models' top-level calls of this step, kept to replay them

    def paused(self) -> ContextManager[None]:
        """While a detector runs a model itself: its calls are not the run's."""


@dataclass
class CheckedStep:
    """One optimizer's step, about to be applied (or just applied)."""

    run: Run  # the watch: its models (tops), names, events, the step's losses and backward line
    optimizer: torch.optim.Optimizer
    watched: Stepped  # its label, step count, checks
    params: list[torch.Tensor]  # the optimizer's parameters that require grad, in its order
    names: list[str]  # theirs, as named_parameters() gives them
    reading: StepReading | None  # the check's numbers (None in `applied` of an unchecked step)

    @property
    def step(self) -> int:
        return self.watched.steps


class Detector:
    """The protocol: override what the detector needs."""

    def backward(self, run: Run, roots: list[torch.Tensor]) -> None:
        return None

    def backward_done(self, run: Run) -> None:
        return None

    def check(self, step: CheckedStep) -> list[Found]:
        return []

    def applied(self, step: CheckedStep) -> None:
        return None

    def end(self, run: Run) -> list[Found]:
        return []


def measured(checks: int, every: int) -> bool:
    """The health cadence of the silent checks that cost a pass over the parameters: whether an
    optimizer's `checks`-th check is measured: powers of two (early in a run), and every
    `every`-th (--health-every; 0: none beyond the powers of two)."""
    return checks & (checks - 1) == 0 or (every > 0 and checks % every == 0)


def next_check_measured(step: CheckedStep) -> bool:
    """At a step just applied: whether the optimizer's next step is checked (--every) and that
    check is measured (above): what a detector noting this step for the next check asks."""
    options = step.run.options
    return (step.step + 1) % options.every == 0 and measured(step.watched.checks + 1, options.health_every)


def graph_leaves(roots: list[Any]) -> list[torch.Tensor]:
    """The leaves backward reaches from `roots` (their AccumulateGrad nodes' variables)."""
    from ...graph.nodes import is_accumulate, walk

    return [n.variable for n in walk([getattr(r, "grad_fn", None) for r in roots]) if is_accumulate(n)]
