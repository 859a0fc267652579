"""The gradients' own health at a step (health.py's verdicts): a parameter the optimizer holds
that got no gradient, one whose gradient is exactly zero step after step (dead), and on the
health cadence (`--health-every` checked steps) `grads`' VANISHING and EXPLODING. Each (kind,
parameter) is reported once, at the first step it is seen (the `reported` set of the optimizer,
which the non-finite path in session.py shares for its overflowing norms)."""

from __future__ import annotations

from .found import Found
from .. import health
from .protocol import CheckedStep, Detector


class GradientHealth(Detector):
    def check(self, step: CheckedStep) -> list[Found]:
        watched, reading = step.watched, step.reading
        if reading is None:
            return []
        found = health.every_step(reading, step.names, watched.reported, watched.zeros, step.step)
        every = step.run.options.health_every
        if every and watched.checks % every == 0:
            found += health.sizes(step.params, reading, step.names, step.run.names.owners(step.params),
                                  watched.reported)
        return found
