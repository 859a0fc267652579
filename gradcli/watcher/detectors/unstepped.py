"""A gradient with no optimizer: parameters backward reaches that no optimizer holds.

`optimizer = Adam(model.body.parameters())` leaves the head out: it gets gradients every step
and never moves. Layers kept in a plain Python list are the same bug seen from the other side:
`model.parameters()` never sees them, so the optimizer built from it does not hold them either.

The parameters backward reaches are read from the first steps' graphs (their AccumulateGrad
nodes: `nn.Parameter`s only, so an input that requires grad is not one), until every optimizer
has stepped once (an optimizer comes back for its second check) or the run ends; then the
verdict, against every optimizer the run built (events/methods.py) or stepped. A parameter frozen with
requires_grad_(False) is in no graph, so a frozen backbone is not a finding.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from ..names import module_of
from .found import Found
from .protocol import CheckedStep, Detector, Run, graph_leaves



class NoOptimizer(Detector):
    def __init__(self) -> None:
        self.reached: dict[int, torch.nn.Parameter] = {}
        self.stepped: list[Any] = []  # weakrefs to the optimizers seen stepping
        self.done = False

    def backward(self, run: Run, roots: list[torch.Tensor]) -> None:
        if not self.done:
            for leaf in graph_leaves(roots):
                if isinstance(leaf, torch.nn.Parameter) and leaf.requires_grad:
                    self.reached.setdefault(id(leaf), leaf)

    def check(self, step: CheckedStep) -> list[Found]:
        if self.done:
            return []
        if not any(ref() is step.optimizer for ref in self.stepped):
            self.stepped.append(weakref.ref(step.optimizer))
        if step.watched.checks < 2:
            return []
        return self._verdict(step.run)

    def end(self, run: Run) -> list[Found]:
        return [] if self.done else self._verdict(run)

    def _verdict(self, run: Run) -> list[Found]:
        self.done = True
        optimizers = run.events.live(run.events.optimizers) + [o for o in (r() for r in self.stepped) if o is not None]
        held = {id(p) for o in optimizers for group in o.param_groups for p in group["params"]}
        unheld = [p for key, p in self.reached.items() if key not in held]
        self.reached = {}
        # a leaf that is no model's parameter, not even from a plain list, is not the user's to train:
        # FSDP2 runs forward on unsharded copies of the parameters, while the optimizer holds the shards
        named = [(name, p) for name, p in zip(run.names.parameters(unheld), unheld) if module_of(name) is not None]
        unheld = [p for _, p in named]
        if not unheld or not optimizers:
            return []
        names = sorted(name for name, _ in named)
        first = next((o for o in optimizers if run.events.site_of(run.events.optimizers, o) is not None), optimizers[0])
        detail = {"parameters_unheld": len(unheld), "elements": sum(p.numel() for p in unheld),
                  "optimizer_class": type(first).__name__}
        outside = run.names.outside(unheld)
        if outside:
            detail["outside_parameters"] = len(outside)  # in no module's parameters(): a plain Python list
        return [Found("no_optimizer", names, detail, site=run.events.site_of(run.events.optimizers, first))]
