"""`zero_grad()` between `backward()` and `step()`: the step sees no gradient.

At a check, every gradient of the optimizer is None or exactly zero although backward ran since
its last step and its graph reaches the optimizer's parameters (their AccumulateGrad nodes; the
graph's shape outlives backward). None after such a backward can only be a reset; all-zero
gradients are a finding only when a zero_grad() call came after the last backward (a constant
loss gives zeros too, with no reset). The line is that zero_grad() call's (events/methods.py).
"""

from __future__ import annotations

from .found import Found
from .protocol import CheckedStep, Detector, graph_leaves


class ZeroedBeforeStep(Detector):
    def __init__(self) -> None:
        self.reported: set[int] = set()

    def check(self, step: CheckedStep) -> list[Found]:
        run, reading = step.run, step.reading
        if reading is None or id(step.optimizer) in self.reported or not run.losses:
            return []
        norms = reading.norms
        if not norms or any(n is not None and n != 0.0 for n in norms):
            return []
        reset = [site for count, site in run.events.zero_grads if count == run.events.backwards]
        if all(n == 0.0 for n in norms) and not reset:
            return []
        reached = {id(v) for v in graph_leaves(run.losses)}
        hit = [name for p, name in zip(step.params, step.names) if id(p) in reached]
        if not hit:
            return []
        self.reported.add(id(step.optimizer))
        state = "None" if all(n is None for n in norms) else "all zero"
        return [Found("zeroed_before_step", hit, {"gradients_at_step": state, "parameters_reached": len(hit)},
                      site=reset[-1] if reset else None)]
