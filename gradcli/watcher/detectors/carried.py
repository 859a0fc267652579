"""Gradients carried over from the previous step: a loop without `zero_grad()`.

backward adds into `.grad`. An optimizer step reads the `.grad` tensors; when the next backward
adds onto those same tensors, untouched since that step (the same object, its version counter
where the step left it: `zero_()` and `grad = None` both change that), the next step applies
the old gradient again plus the new one, and the sum grows step after step.

Each parameter's `.grad` is noted after its optimizer's step (the object and its `_version`)
when the next check is on the health cadence (protocol.measured: checks 1, 2, 4, 8, ... and
every --health-every-th); the next backward compares, and a tensor that was reset leaves the
list, so a healthy loop pays one pass over the parameters after such a step and one at the
next backward. A loop that never zeroes carries at every step, so it is found at check 2. A carry is a finding only
when the optimizer then steps with it: a GAN's generator loss backpropagates through the
discriminator onto gradients its step used, and the discriminator's own zero_grad() resets them
before its next step.

The evidence, measured once: the step's gradient norm against the norm of what this step's own
backward passes added (the carried part is copied at the backward that found it, the only time
a copy is made).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch

from .found import Found
from .protocol import CheckedStep, Detector, Run, local, next_check_measured



class CarriedGradients(Detector):
    def __init__(self) -> None:
        # id(optimizer) -> [param, grad, version, carried] for gradients its last step used, not reset since
        self.tracked: dict[int, list[list[Any]]] = {}
        self.before: dict[int, torch.Tensor] | None = None  # id(param) -> the carried gradient (the first carry)
        self.site: tuple[str, int] | None = None
        self.reported = False

    def applied(self, step: CheckedStep) -> None:
        if self.reported or not next_check_measured(step):  # only before a check on the health cadence
            self.tracked.pop(id(step.optimizer), None)
            return
        # the gradient held weakly: zero_grad(set_to_none=True) must still free it before the next forward
        ref = weakref.ref
        self.tracked[id(step.optimizer)] = [[p, ref(g), g._version, False] for p, g in
                                            zip(step.params, [p.grad for p in step.params]) if g is not None]

    def backward(self, run: Run, roots: list[torch.Tensor]) -> None:
        for key, entries in list(self.tracked.items()):
            kept = [e for e in entries if _same(e)]
            for e in kept:
                if not e[3] and self.before is None:
                    self.site = run.backward_site
                e[3] = True
            if kept and self.before is None:
                with torch.no_grad():
                    self.before = {id(e[0]): local(e[0].grad.detach()).clone() for e in kept}
            self.tracked[key] = kept

    def backward_done(self, run: Run) -> None:
        for entries in self.tracked.values():
            for e in entries:
                grad = e[1]()
                if grad is not None:
                    e[2] = grad._version

    def check(self, step: CheckedStep) -> list[Found]:
        entries = self.tracked.get(id(step.optimizer))
        if self.reported or not entries:
            return []
        carried = {id(e[0]) for e in entries if e[3] and _same(e)}
        if not carried:
            return []
        self.reported = True
        self.tracked = {}
        names = [name for p, name in zip(step.params, step.names) if id(p) in carried]
        return [Found("carried_gradients", names, self._evidence(step, carried), site=self.site)]

    def _evidence(self, step: CheckedStep, carried: set[int]) -> dict[str, Any]:
        """‖step's gradient‖ and ‖what this step's backward added‖, over the carried parameters."""
        total = own = 0.0
        before = self.before or {}
        with torch.no_grad():
            for p in step.params:
                if id(p) in carried and id(p) in before:
                    total += float(torch.linalg.vector_norm(local(p.grad).float())) ** 2
                    own += float(torch.linalg.vector_norm((local(p.grad) - before[id(p)]).float())) ** 2
        self.before = None
        detail: dict[str, Any] = {"parameters_carried": len(carried)}
        if before:
            detail.update(step_grad_norm=math.sqrt(total), backward_grad_norm=math.sqrt(own),
                          times=math.sqrt(total / own) if own > 0 else float("inf"))
        return detail


def _same(entry: list[Any]) -> bool:
    """The parameter's `.grad` is still the tensor its optimizer's step used, untouched since."""
    grad = entry[1]()
    return grad is not None and entry[0].grad is grad and grad._version == entry[2]
