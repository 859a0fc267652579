"""`grads --ddp N`: the health table of the gradients DDP hands the optimizer (the reduced ones,
as rank 0 holds them), and the parameters whose ranks disagree after the reduction.

The table is `grads`' own: its one-process run on the whole batch gives the rows, their
forward order and the reasons of NO GRAD and ZERO (where a gradient stops does not depend on
the number of ranks); each row's numbers are then those of the reduced gradient, and the
VANISHING/EXPLODING verdicts are taken again on them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from ..health.result import GradsResult
from ..health.stats import grad_stats
from ..health.run import PURPOSE, grads_of
from ..health.verdicts import judge_sizes, median_ratio
from ..outcome import Problem, Reported
from ..targets.model import on_model
from ..words import problem_sentences
from .judge import judge
from .launch import TIMEOUT, Ranks, start_ranks
from .reference import reference
from .result import Comparison
from .setup import Setup
from .target import one_process
from .worker import job

#: Findings that depend on the gradient's size, taken again on the reduced numbers.
SIZE_FLAGS = ("VANISHING", "EXPLODING")


@dataclass
class DistributedGrads(Reported):
    """`grads --ddp N`: the reduced gradients' health, and the ranks' agreement."""

    health: GradsResult
    run: Comparison
    world: int
    backend: str

    @property
    def notes(self) -> list[str]:
        return self.health.notes

    @property
    def problems(self) -> list[Problem]:
        found = list(self.health.problems)
        if self.run.skipped:
            found.append(Problem("would-hang", "", {"no_grad": self.run.no_grad}))
        if self.run.ddp_error:
            found.append(Problem("ddp-error", "", {"error": self.run.ddp_error.splitlines()[0]}))
        for row in self.run.unsynced:
            found.append(Problem("unsynchronised", row.name, {"spread": row.spread, "tolerance": row.tolerance}))
        return found

    @property
    def differing(self) -> list[str]:
        """Parameters whose reduced gradient is not the one-process gradient (a warning here:
        `compare --ddp N` explains them)."""
        return [r.name for r in self.run.differing]

    def as_dict(self) -> dict[str, Any]:
        """grads' own document of the reduced gradients, with the ranks' agreement under
        `distributed`; `ok` and `problems` are the whole run's."""
        distributed = {
            "world": self.world, "backend": self.backend, "ok": self.ok,
            "unsynchronised": [{"name": r.name, "spread": r.spread} for r in self.run.unsynced],
            "differs_from_one_process": self.differing, "no_grad_by_rank": self.run.no_grad,
            "ddp_error": self.run.ddp_error, "skipped": self.run.skipped,
            "problems": problem_sentences(self.problems),
        }
        return self.health.as_dict() | {"ok": self.ok, "problems": distributed["problems"], "distributed": distributed}


def grads_distributed(setup: Setup, *, timeout: float = TIMEOUT, ranks: Ranks | None = None, **options: Any) -> DistributedGrads:
    """`options` are grads' (vanish, explode, spread, strict); `ranks`: a group already running."""
    with contextlib.ExitStack() as stack:
        if ranks is None:
            ranks = stack.enter_context(start_ranks(setup.world, setup.backend, timeout))
        setup = setup.agreed(ranks.agree(setup.seed))
        # While the ranks import torch: grads' own run and the reference, on one process.
        health = on_model(grads_of, one_process(setup), purpose=PURPOSE, **options)
        ref = reference(setup, setup.world)
        runs = ranks.run(job(setup))
    run = judge(ref, runs)
    _reduced_numbers(health, runs[0].gradients())
    return DistributedGrads(health, run, ranks.world, setup.backend)


def _reduced_numbers(health: GradsResult, reduced: dict[str, Any]) -> None:
    """Each judged row's numbers from its reduced gradient; size verdicts taken again."""
    rows = [p for p in health.judged if reduced.get(p.name) is not None]
    for p, s in zip(rows, grad_stats([reduced[p.name] for p in rows])):
        p.grad_norm, p.max_abs, p.mean_abs, p.zero_share = s.grad_norm, s.max_abs, s.mean_abs, s.zero_share
    for p in health.judged:
        p.findings = [f for f in p.findings if f.flag not in SIZE_FLAGS]
    sized = [p for p in health.judged if not p.findings and p.grad_norm is not None]
    health.median_ratio = median_ratio(sized)
    judge_sizes(sized, health.thresholds, health.median_ratio)
