"""Units that stay identical: rows of a weight that start equal and never tell apart.

A layer initialised to a constant (`nn.init.constant_(w, 0.1)`, `w.fill_(...)`) gives each of
its units (the rows of its weight: a Linear's output features, a convolution's filters) the
same incoming weights; the units then compute the same thing, receive the same gradient, get
the same update, and stay copies of one another for the whole run: the layer is as wide as one
unit. Symmetry breaking is what a random init is for.

At the first check, each trained weight of two or more dimensions has its rows compared with
its first row (one elementwise pass, exact). Rows equal to it are noted, and looked at again
CONFIRM checks later (or at the end of a shorter run, once AT_LEAST steps were applied): still
exactly equal is the finding. Rows that only start equal part at the first update and are no
finding: a zero-initialised last layer (its output units get different gradients from the
targets) or LoRA's B = 0 (its rows' gradients differ by output).
"""

from __future__ import annotations

from typing import Any

import torch

from .found import Found
from .protocol import CheckedStep, Detector, local

#: Checks between the first look and the confirmation.
CONFIRM = 10
#: A run ending before CONFIRM checks is confirmed at its end after this many applied steps.
AT_LEAST = 3


class IdenticalUnits(Detector):
    def __init__(self) -> None:
        self.first: dict[int, tuple[int, int, list[tuple[str, torch.Tensor, torch.Tensor]]]] = {}
        # id(optimizer) -> (check number, step, [(name, weight, row indices equal to row 0)])
        self.applied_steps: dict[int, int] = {}
        self.done: set[int] = set()

    def applied(self, step: CheckedStep) -> None:
        self.applied_steps[id(step.optimizer)] = self.applied_steps.get(id(step.optimizer), 0) + 1

    def check(self, step: CheckedStep) -> list[Found]:
        key = id(step.optimizer)
        if key in self.done:
            return []
        noted = self.first.get(key)
        if noted is None:
            self.first[key] = (step.watched.checks, step.step, _equal_rows(step.params, step.names))
            self.applied_steps[key] = 0
            if not self.first[key][2]:
                self.done.add(key)
            return []
        if step.watched.checks - noted[0] < CONFIRM:
            return []
        return self._confirm(key)

    def end(self, run: Any) -> list[Found]:
        found: list[Found] = []
        for key in list(self.first):
            if key not in self.done and self.applied_steps.get(key, 0) >= AT_LEAST:
                found += self._confirm(key)
        return found

    def _confirm(self, key: int) -> list[Found]:
        self.done.add(key)
        _, since, groups = self.first.pop(key)
        names, units, largest = [], 0, 0
        with torch.no_grad():
            for name, weight, rows in groups:
                flat = weight.detach().flatten(1)
                if not bool((flat[rows] == flat[rows[0]]).all()):
                    continue
                grad = weight.grad
                if grad is None or not bool(grad.flatten(1)[rows].any()):  # no gradient reached them: not this
                    continue
                names.append(name)
                units += len(rows)
                largest = max(largest, len(rows))
        if not names:
            return []
        return [Found("identical_units", names, {"units": units, "largest_group": largest, "since_step": since,
                                                 "steps": self.applied_steps.get(key, 0)})]


def _equal_rows(params: list[torch.Tensor], names: list[str]) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Each weight of 2+ dimensions whose rows 1.. include copies of row 0: (name, weight, those rows with 0)."""
    found = []
    with torch.no_grad():
        for p, name in zip(params, names):
            if p.dim() < 2 or p.shape[0] < 2 or p.is_sparse:
                continue
            flat = local(p.detach()).flatten(1)
            same = (flat == flat[0]).all(1)
            if int(same.sum()) >= 2:
                found.append((name, p, same.nonzero().flatten()))
    return found
