"""Nothing learns, or updates far too large: each layer's update-to-weight ratio ‖Δw‖/‖w‖.

A layer is a module holding parameters directly (precursors.py's grouping); Δw is what one
optimizer step changed, w the weights after it, both over the layer's parameters together (a
bias initialised at 0 has no ratio of its own, its layer has). Measured on a sparse cadence:
the checks 1, 2, 4, 8, ... (powers of two) and every `--health-every`-th check after; at such a
check the optimizer's parameters are copied (one `_foreach` copy), and when its step is applied
the difference is taken and its norms and the weights' are read back in one host read. Other
steps pay one integer test.

Two verdicts on the optimizer's layers, each reported once per optimizer, with the line that
built the optimizer (its learning rate) when the run built it under watch (events.py):

- **too small**: the fastest layer moves by less than LOW per step, on LOW_TIMES measurements
  in a row, while every group's learning rate is at least half its base (`initial_lr`, else
  the highest seen here): warmup's first steps and the tail of a cosine or linear decay are the
  schedule's own small steps, not a rate too small for the model (learning_rate.py judges a
  rate that collapsed). A learning rate 1e-4 times too small makes nothing learn.
- **too large**: the median layer moves by more than HIGH of its own size per step, on
  HIGH_TIMES measurements in a row: the loss then oscillates, with no nan to stop on (Adam's
  step is bounded by its learning rate, and cross-entropy's gradient by 1 a logit).

LOW and HIGH come from bench/watch_calibrate.py's healthy grid (127 runs: MLPs and CNNs with
Adam, AdamW, SGD with momentum and RMSprop at batch 16-64, seeds 0-7, 300 steps each, and
tests/watch_healthy.py's corpus). The fastest layer's ratio at the base rate was never below
1.8e-3 (LOW = 1e-5: 180 times under it; a rate 1e-4 times too small gives 1e-6 to 1e-5), the
median layer's never above 0.22 (a WGAN critic clamped to ±0.01, RMSprop; 0.09 elsewhere).
HIGH = 0.5 sits 2.3 times above that: the statistic saturates near 1 (an update the size of the
weights), which Adam at 0.3 or 1.0 on the tests' MLP reaches at its first steps (0.6 to 0.99).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

from .found import Found
from ..names import module_of
from .protocol import CheckedStep, Detector, Run, local, measured
from .learning_rate import _rate


#: The fastest layer's ‖Δw‖/‖w‖ below this is "nothing learns" (healthy grid: at least 1.8e-3).
LOW = 1e-5
#: The median layer's ‖Δw‖/‖w‖ above this is "updates far too large" (healthy grid: at most 0.22).
HIGH = 0.5
LOW_TIMES = 3
HIGH_TIMES = 2


class UpdateRatio(Detector):
    def __init__(self) -> None:
        # id(optimizer) -> (step, params, names, copies, rates ok for "too small")
        self.copies: dict[int, tuple[int, list[torch.Tensor], list[str], list[torch.Tensor], bool]] = {}
        self.low: dict[int, list[tuple[int, dict[str, float]]]] = {}  # id(optimizer) -> measurements too small in a row
        self.high: dict[int, list[tuple[int, dict[str, float]]]] = {}
        self.reported: set[tuple[int, str]] = set()
        self.pending: list[Found] = []
        self.peak: dict[tuple[int, int], float] = {}
        self.measurements: list[tuple[int, int, dict[str, float]]] = []  # (id(optimizer), step, layer -> ratio)

    def check(self, step: CheckedStep) -> list[Found]:
        found, self.pending = self.pending, []
        if step.reading is None or not measured(step.watched.checks, step.run.options.health_every):
            return found
        with torch.no_grad():
            copies = torch._foreach_mul([local(p.detach()) for p in step.params], 1.0) if step.params else []
        self.copies[id(step.optimizer)] = (step.step, step.params, step.names, copies, self._rates_at_base(step))
        return found

    def applied(self, step: CheckedStep) -> None:
        taken = self.copies.pop(id(step.optimizer), None)
        if taken is None:
            return
        at, params, names, copies, at_base = taken
        if at != step.step or not params:
            return
        with torch.no_grad():
            now = [local(p.detach()) for p in params]
            torch._foreach_sub_(copies, now)  # the copies become -Δw: no second set of tensors
            values = torch.stack(torch._foreach_norm(copies) + torch._foreach_norm(now)).float().tolist()
        moved, sizes = values[:len(params)], values[len(params):]
        ratios = layer_ratios(names, moved, sizes)
        key = id(step.optimizer)
        self.measurements.append((key, at, ratios))
        if not ratios:
            return
        fastest, median = max(ratios.values()), statistics.median(ratios.values())
        low = self.low.setdefault(key, [])
        low[:] = [*low, (at, ratios)] if fastest < LOW and at_base else []
        high = self.high.setdefault(key, [])
        high[:] = [*high, (at, ratios)] if median > HIGH else []
        events = step.run.events
        site = events.site_of(events.optimizers, step.optimizer)  # the line that set its learning rate
        if len(low) >= LOW_TIMES and (key, "small") not in self.reported:
            self.reported.add((key, "small"))
            self.pending.append(_found("small", low, names, fastest, site))
        if len(high) >= HIGH_TIMES and (key, "large") not in self.reported:
            self.reported.add((key, "large"))
            self.pending.append(_found("large", high, names, median, site))

    def end(self, run: Run) -> list[Found]:
        found, self.pending = self.pending, []
        return found

    def _rates_at_base(self, step: CheckedStep) -> bool:
        """Every group's learning rate at least half its base (not in a warmup or a decay's tail)."""
        for index, group in enumerate(step.optimizer.param_groups):
            rate = _rate(group.get("lr"))
            if rate is None:
                continue
            key = (id(step.optimizer), index)
            peak = self.peak[key] = max(self.peak.get(key, rate), rate)
            base = _rate(group.get("initial_lr"))
            if rate < 0.5 * (base if base is not None else peak):
                return False
        return True


def layer_ratios(names: list[str], moved: list[float], sizes: list[float]) -> dict[str, float]:
    """Each layer's ‖Δw‖/‖w‖ over its parameters together; layers that did not move at all (no
    gradient, not stepped) or whose weights are all zero are left out."""
    squares: dict[str, list[float]] = {}
    for name, d, w in zip(names, moved, sizes):
        layer = module_of(name) or name
        total = squares.setdefault(layer, [0.0, 0.0])
        total[0] += d * d
        total[1] += w * w
    return {layer: math.sqrt(d / w) for layer, (d, w) in squares.items()
            if d > 0 and w > 0 and math.isfinite(d) and math.isfinite(w)}


def _found(how: str, measurements: list[tuple[int, dict[str, float]]], names: list[str], value: float,
           site: tuple[str, int] | None) -> Found:
    first, ratios = measurements[0][0], measurements[-1][1]
    if how == "small":
        layers = sorted(ratios, key=ratios.get)  # type: ignore[arg-type]
    else:
        layers = [layer for layer in sorted(ratios, key=ratios.get, reverse=True) if ratios[layer] > HIGH]  # type: ignore[arg-type]
    detail: dict[str, Any] = {
        "how": how, "bound": LOW if how == "small" else HIGH,
        "statistic": "largest" if how == "small" else "median", "value": value,
        "measured_steps": [at for at, _ in measurements],
        "ratios": [ratios[layer] for layer in layers],  # each of `modules`, in its order
    }
    params = [name for name in names if (module_of(name) or name) in layers]
    return Found("update_ratio", params, detail, at=first, modules=layers, site=site)
