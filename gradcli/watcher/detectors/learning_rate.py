"""A learning rate that collapsed or exploded, read from the optimizer's `param_groups` at each
check (a float per group: nothing on the device is read).

Collapsed: a group's rate fell below COLLAPSED (1e-6) of the highest it had in the run, and
stayed there for LOW_CHECKS checked steps and a tenth of the steps before it fell, so the end of
a cosine schedule that reaches zero (its last few steps) is no finding, while an epoch scheduler
stepped once per batch (StepLR(step_size=30) at step 180: 1e-6) is. Exploded: a rate above
EXPLODED (1000) times the scheduler's base rate (`initial_lr`, which warmup and one-cycle
schedules never pass by more than their max/base factor, 25 for OneCycleLR's default), or the
first rate seen without a scheduler. The scheduler that drives the group is named with its class,
the line that built it (events/methods.py) and how many times it was stepped.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .found import Found
from .protocol import CheckedStep, Detector

COLLAPSED = 1e-6
EXPLODED = 1e3
LOW_CHECKS = 10


class LearningRate(Detector):
    def __init__(self) -> None:
        self.first: dict[tuple[int, int], float] = {}
        self.peak: dict[tuple[int, int], tuple[float, int]] = {}  # (rate, step)
        self.low: dict[tuple[int, int], tuple[int, int]] = {}  # (the step it fell, checks since)
        self.reported: set[int] = set()

    def check(self, step: CheckedStep) -> list[Found]:
        if id(step.optimizer) in self.reported:
            return []
        for index, group in enumerate(step.optimizer.param_groups):
            rate = _rate(group.get("lr"))
            if rate is None:
                continue
            key = (id(step.optimizer), index)
            first = self.first.setdefault(key, rate)
            peak, peak_step = self.peak.get(key, (rate, step.step))
            if rate > peak:
                peak, peak_step = rate, step.step
            self.peak[key] = peak, peak_step
            base = group.get("initial_lr", first)
            if base > 0 and rate > EXPLODED * base:
                return self._found(step, index, "exploded", first, peak, peak_step, rate, step.step)
            if peak > 0 and rate < COLLAPSED * peak:
                fell, checks = self.low.get(key, (step.step, 0))
                self.low[key] = fell, checks + 1
                if checks + 1 >= max(LOW_CHECKS, math.ceil(0.1 * fell)):
                    return self._found(step, index, "collapsed", first, peak, peak_step, rate, fell)
            else:
                self.low.pop(key, None)
        return []

    def _found(self, step: CheckedStep, index: int, how: str, first: float, peak: float, peak_step: int,
               rate: float, since: int) -> list[Found]:
        self.reported.add(id(step.optimizer))
        detail: dict[str, Any] = {"how": how, "group": index, "lr_first": first, "lr_peak": peak,
                                  "peak_step": peak_step, "lr_now": rate, "since_step": since,
                                  "checked_step": step.step}
        events = step.run.events
        scheduler = next((s for s in events.live(events.schedulers) if getattr(s, "optimizer", None) is step.optimizer),
                         None)
        site = None
        if scheduler is not None:
            site = events.site_of(events.schedulers, scheduler)
            detail.update(scheduler=type(scheduler).__name__, scheduler_steps=getattr(scheduler, "last_epoch", None),
                          optimizer_steps=step.step)
        return [Found("learning_rate", [], detail, at=since, site=site)]


def _rate(value: Any) -> float | None:
    if isinstance(value, torch.Tensor):  # a tensor rate (capturable optimizers): only a CPU one is read
        return float(value) if value.device.type == "cpu" and value.numel() == 1 else None
    return float(value) if isinstance(value, (int, float)) else None
