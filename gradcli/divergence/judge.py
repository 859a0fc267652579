"""Step by step, the two runs against the band, and what parted first at the first step past it.

At each step the question is asked in the order a step computes: the data (the batches'
hashes, exact), the forward (the loss), the backward (every parameter's gradient), the update
(every parameter after the step, or a step one run skipped). The parameters before step k are
the ones after step k-1, which agreed, so the first of these past its band is where the runs
part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from .band import Band, gap, ratio
from .runs import RunLog

Phase = Literal["data", "forward", "backward", "update"]


@dataclass
class StepJudged:
    """One step of the pair: each quantity's distance in bands (above 1: past the band)."""

    step: int
    batch_same: bool | None  # None: no tensor to hash
    loss: tuple[float | None, float | None]
    loss_ratio: float
    grad_ratio: float
    grad_worst: str | None
    param_ratio: float
    param_worst: str | None
    skipped: tuple[bool, bool]
    layers: dict[str, float] = field(default_factory=dict)  # parameter -> its gradient's distance in bands

    @property
    def phase(self) -> Phase | None:
        if self.batch_same is False:
            return "data"
        if self.loss_ratio > 1:
            return "forward"
        if self.grad_ratio > 1:
            return "backward"
        if self.param_ratio > 1 or self.skipped[0] != self.skipped[1]:
            return "update"
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "batch_same": self.batch_same, "loss": [_number(x) for x in self.loss],
                "loss_bands": _number(self.loss_ratio), "grad_bands": _number(self.grad_ratio),
                "grad_worst": self.grad_worst, "param_bands": _number(self.param_ratio), "param_worst": self.param_worst,
                "skipped": list(self.skipped), "phase": self.phase,
                "layers": {k: _number(v) for k, v in self.layers.items()}}


def judge(a: RunLog, b: RunLog, float32: RunLog, float64: RunLog, band: Band) -> list[StepJudged]:
    """Every step all four runs reached."""
    count = min(len(a.steps), len(b.steps), len(float32.steps), len(float64.steps))
    sharded = a.setup.ranks != b.setup.ranks  # a rank's batch is its shard: not the whole batch's bytes
    judged = []
    for k in range(count):
        sa, sb, s32, s64 = a.steps[k], b.steps[k], float32.steps[k], float64.steps[k]
        same = None if sa["batch"] is None or sb["batch"] is None or sharded else sa["batch"] == sb["batch"]
        loss = _ratio(_loss(sa), _loss(sb), _loss(s32), _loss(s64), band)
        layers = _ratios(sa["grads"], sb["grads"], s32["grads"], s64["grads"], band)
        params = _ratios(sa["params"], sb["params"], s32["params"], s64["params"], band)
        grad_worst = max(layers, key=layers.__getitem__, default=None)
        param_worst = max(params, key=params.__getitem__, default=None)
        judged.append(StepJudged(sa["step"], same, (sa["loss"], sb["loss"]), loss,
                                 layers[grad_worst] if grad_worst else 0.0, grad_worst,
                                 params[param_worst] if param_worst else 0.0, param_worst,
                                 (bool(sa["skipped"]), bool(sb["skipped"])), layers))
    return judged


def first_parting(steps: list[StepJudged]) -> StepJudged | None:
    return next((s for s in steps if s.phase is not None), None)


def _loss(step: dict[str, Any]) -> list[float]:
    return [math.nan if step["loss"] is None else step["loss"]]


def _ratio(a: list[float], b: list[float], x32: list[float], x64: list[float], band: Band) -> float:
    return ratio(gap(a, b), band.of(x32, x64))


def _ratios(a: dict[str, list[float]], b: dict[str, list[float]], x32: dict[str, list[float]],
            x64: dict[str, list[float]], band: Band) -> dict[str, float]:
    out = {}
    for name in dict.fromkeys([*a, *b]):
        if name not in a or name not in b:
            out[name] = math.inf  # a gradient only one run has
        elif name in x32 and name in x64:
            out[name] = _ratio(a[name], b[name], x32[name], x64[name], band)
        else:
            out[name] = ratio(gap(a[name], b[name]), band.factor * band.unit * abs(b[name][0]))
    return out


def _number(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
