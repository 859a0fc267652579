"""Spikes seen before the loss moves: two per-layer statistics, from what the check reads anyway.

A layer is a module that holds parameters directly (its parameters' gradients together).

- **A layer's gradient norm** (the root of its parameters' squared norms) against its own
  window, by spikes.py's robust z-score with the ratio of the global one and LAYER_SPIKE times
  its z threshold: one global norm hides the layer that spikes when larger layers dominate it.
- **g² against Adam's second moment**, under an optimizer whose state holds `exp_avg_sq` and
  whose groups hold `betas` (Adam, AdamW, NAdam, RAdam): r = Σg² / Σv̂ over the layer's
  elements, v̂ the bias-corrected second moment before this step's update. Adam moves each
  element by about lr·g/√v̂, so r is the square of the layer's update in units of what Adam
  expects: near 1 in a steady run, below 1 while gradients shrink, and far above 1 when v̂ lags
  behind a gradient that grew, the state that precedes loss spikes (Wortsman et al. 2023,
  arXiv 2304.13013). A warning when r passes `adam_ratio` (bench/watch_spikes.py measured the
  runs made to spike; the README has the table). r is heavy-tailed in small layers: on
  bench/watch_calibrate.py's healthy grid (48 runs of an MLP and a CNN with Adam and AdamW at
  batch 16 and 64, 300 steps, seeds 0-2, and tests/watch_healthy.py's corpus) the largest r was
  24.5 (the 99-element head of an MLP at batch 16, seed 2), 10-14 on six others (gradient
  accumulation, a LoRA adapter, GPT-2), below 10 on the other 120 (40 more runs of Adam and
  AdamW at seeds 3-7: 9.3 at most). The default, 30, clears the largest by a factor of 1.2
  and the rest by 2. It gives up some lead: the runs of bench/watch_spikes.py made to spike
  reach 17-38 on the CNN (ramps and a x30 jump) before their loss doubles, so at 30 two of the
  four CNN runs are warned early (8 and 89 steps) and at 10 all four were, with the healthy
  runs above warned too. No verdict before a parameter's ADAM_MIN_STEPS-th update, while v̂
  averages too few steps.

Σv is not read from the optimizer every step: it follows Adam's own recursion,
Σv_t = β2·Σv_{t-1} + (1-β2)·‖g_t‖², from the gradient norms the check reads anyway. It is read
(its sum joins the check's one host read, reading.py) when the recursion cannot know it: at the
first check after Adam made its state, when the optimizer's step count is not the one expected
(a step skipped after the check), every check with `--every` above 1 (the steps between were not
seen), and every check when Adam adds an L2 term to the gradient (`weight_decay` without
decoupling: the gradient Adam squares is not the one the check read).

Each (statistic, layer) is reported when it starts: a layer flagged on consecutive checks is one
warning, and a new one after a check without it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .detectors.found import Found
from .names import module_of
from .reading import StepReading
from .spikes import SpikeDetector

#: A parameter's Adam updates before its ratio is judged.
ADAM_MIN_STEPS = 10
#: A layer's spike needs a z-score this many times --spike (12 at the default 8): each layer is a
#: test of its own at every step, so the largest of a model's layer z-scores runs above one
#: global statistic's. bench/watch_calibrate.py's healthy grid (87 runs: MLPs and CNNs with
#: Adam, AdamW, SGD and RMSprop at batch 16 and 64, 300 steps, seeds 0-2, and the corpus of
#: tests/watch_healthy.py): the largest layer z among values above --spike-ratio times their
#: median was 6.9 (fine-tuning with frozen BatchNorm), the global norm's 8.3 on the same run.
LAYER_SPIKE = 1.5


class SecondMoments:
    """Σv of each parameter Adam keeps a second moment for, held between checks."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.sums: dict[int, float] = {}  # id(param) -> Σ exp_avg_sq after its last update
        self.counts: dict[int, int] = {}  # id(param) -> its update count at that sum
        self.betas: dict[int, float] = {}  # id(param) -> β2
        self._read: list[tuple[int, int]] = []  # (id, update count) of the sums this check reads

    def wanted(self, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        """The second moments to read at this check (in reading.py's one host read)."""
        self._read, tensors = [], []
        for group in optimizer.param_groups:
            if "betas" not in group:
                continue
            follows = self.every == 1 and _gradient_is_squared(optimizer, group)
            for p in group["params"]:
                state = optimizer.state.get(p)
                if not state or "exp_avg_sq" not in state:
                    continue
                count = _count(state.get("step"))
                if count is None:  # a step count on the device (capturable): reading it would wait
                    continue
                key = id(p)
                self.betas[key] = group["betas"][1]
                if not follows or self.counts.get(key) != count:
                    self._read.append((key, count))
                    tensors.append(state["exp_avg_sq"])
        return tensors

    def take(self, read: list[float] | None) -> None:
        """The sums read at this check (a check that ends early, a GradScaler's skipped step,
        takes none: they are read again at the next)."""
        for (key, count), total in zip(self._read, read or []):
            self.sums[key], self.counts[key] = total, count

    def expected(self, p: torch.Tensor) -> float | None:
        """v̂ summed over `p`: what Adam expects of this step's Σg² (None: no verdict yet)."""
        key = id(p)
        count = self.counts.get(key, 0)
        if key not in self.sums or count < ADAM_MIN_STEPS:
            return None
        return self.sums[key] / (1 - self.betas[key] ** count)

    def advance(self, params: list[torch.Tensor], norms: list[float | None]) -> None:
        """The step is about to be applied: Adam's recursion on the norms the check read (a
        parameter without a gradient is not updated by Adam)."""
        for p, norm in zip(params, norms):
            key = id(p)
            if norm is not None and key in self.sums:
                beta = self.betas[key]
                self.sums[key] = beta * self.sums[key] + (1 - beta) * norm * norm
                self.counts[key] += 1


class Precursors:
    """One optimizer's per-layer statistics, judged at each check."""

    def __init__(self, window: int, threshold: float, ratio: float, adam_ratio: float, every: int) -> None:
        self.window, self.threshold, self.ratio, self.adam_ratio = window, threshold, ratio, adam_ratio
        self.moments = SecondMoments(every)
        self.detectors: dict[str, SpikeDetector] = {}
        self.active: set[tuple[str, str]] = set()  # (kind, layer) flagged at the previous check
        self._layers: tuple[tuple[str, ...], dict[str, list[int]]] | None = None
        self.ratios: dict[str, float] = {}  # each layer's ratio at the last check (for --log)

    def judge(self, reading: StepReading, names: list[str], params: list[torch.Tensor]) -> list[Found]:
        self.moments.take(reading.moments)
        self.ratios = {}
        flagged: list[tuple[str, str, list[int], dict[str, Any]]] = []
        for layer, members in self._grouped(names).items():
            squares = [reading.norms[i] ** 2 for i in members if reading.norms[i] is not None]  # type: ignore[operator]
            detector = self.detectors.get(layer)
            if detector is None:
                detector = self.detectors[layer] = SpikeDetector(self.window, LAYER_SPIKE * self.threshold, self.ratio,
                                                                   scored=False)
            spike = detector.add(math.sqrt(sum(squares)) if squares else None)
            if spike is not None:
                flagged.append(("layer_spike", layer, members,
                                {"value": spike.value, "median": spike.median, "z": round(spike.z, 1)}))
            ratio = self._ratio(reading, params, members) if self.moments.sums else None
            if ratio is not None:
                self.ratios[layer] = ratio
            if ratio is not None and ratio > self.adam_ratio:
                flagged.append(("adam_ratio", layer, members, {"ratio": round(ratio, 1)}))
        self.moments.advance(params, reading.norms)
        now = {(kind, layer) for kind, layer, _, _ in flagged}
        found = [Found(kind, [names[i] for i in members], {"layer": layer, **detail})
                 for kind, layer, members, detail in flagged if (kind, layer) not in self.active]
        self.active = now
        return found

    def _ratio(self, reading: StepReading, params: list[torch.Tensor], members: list[int]) -> float | None:
        squares = expected = 0.0
        for i in members:
            norm, v = reading.norms[i], self.moments.expected(params[i])
            if norm is None or v is None:
                continue
            squares += norm * norm
            expected += v
        return squares / expected if expected > 0 and math.isfinite(squares) else None

    def _grouped(self, names: list[str]) -> dict[str, list[int]]:
        key = tuple(names)
        if self._layers is None or self._layers[0] != key:
            layers: dict[str, list[int]] = {}
            for i, name in enumerate(names):
                module = module_of(name)
                layers.setdefault(name if module is None else module, []).append(i)
            self._layers = key, layers
        return self._layers[1]


def _gradient_is_squared(optimizer: torch.optim.Optimizer, group: dict[str, Any]) -> bool:
    """Adam squares the gradient the check read: no weight decay, or decoupled (AdamW's)."""
    return (not group.get("weight_decay") or bool(group.get("decoupled_weight_decay"))
            or isinstance(optimizer, torch.optim.AdamW))


def _count(step: Any) -> int | None:
    """Adam's step count for a parameter: a number or a CPU tensor (None on a device)."""
    if isinstance(step, torch.Tensor):
        return int(step.item()) if step.device.type == "cpu" else None
    return int(step) if step is not None else None
