"""The thresholds of watch's warnings and of its update-ratio detector, measured on healthy runs.

    python bench/watch_calibrate.py                       # the grid: 48 runs of 300 steps
    python bench/watch_calibrate.py --seeds 0 1 2 3 4 --steps 500
    python bench/watch_calibrate.py --corpus              # tests/watch_healthy.py's runs too

The grid: an MLP classifier (8 -> 32 -> 32 -> 3) and a CNN with BatchNorm and dropout
(tests/watch_healthy.py's), each with Adam (1e-3), AdamW (1e-3, weight decay 0.01), SGD with
momentum 0.9 (0.05) and RMSprop (1e-3), at batch 16 and 64, seeds 0-2, 300 steps: ordinary
runs that learn. Each runs under `gradcli.watch(health_every=10)` and prints, per run, the
largest value each statistic reached (what would make a warning or a finding if it passed its
bound), beside the bound in force:

- loss z, grad z: the robust z-scores of the loss and of the gradient norm (spikes.py; a spike
  needs z > --spike and the value > --spike-ratio times the window's median);
- layer z: the same z of each layer's gradient norm, over the values above --spike-ratio times
  their median (precursors.py; only those can be a layer spike), and layer x: the largest
  value / median of a layer's norm;
- adam: a layer's Σg²/Σv̂ (precursors.py's Adam ratio, --adam-ratio);
- upd lo: the smallest, over the measurements taken at the base learning rate, of the fastest
  layer's ‖Δw‖/‖w‖ (detectors/update_ratio.py's LOW judges it), and upd hi: the largest of the
  median layer's (HIGH).

The last lines are the maxima (minimum for upd lo) over all runs: the figures the thresholds'
docstrings quote. Nothing here is asserted: it measures.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-3),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-3),
}


def grid_run(model_name: str, optimizer_name: str, batch: int, seed: int, steps: int) -> None:
    from watch_healthy import CNN, MLP, _classes, _data, _images

    torch.manual_seed(seed)
    model = MLP() if model_name == "mlp" else CNN()
    optimizer = OPTIMIZERS[optimizer_name](model.parameters())
    for step in range(steps):
        g = _data(seed, step)
        x, y = _classes(g, batch) if model_name == "mlp" else _images(g, batch)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


class Recorder:
    """The statistics of one run, gathered by wrapping the detectors' methods (no decision changes)."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self._undo: list[Callable[[], None]] = []

    def keep(self, key: str, value: float | None, larger: bool = True) -> None:
        if value is None or not math.isfinite(value):
            return
        old = self.values.get(key)
        if old is None or (value > old if larger else value < old):
            self.values[key] = value

    def __enter__(self) -> "Recorder":
        from gradcli.watcher import precursors, spikes
        from gradcli.watcher.detectors import update_ratio

        recorder = self
        add, judge, applied = spikes.SpikeDetector.add, precursors.Precursors.judge, update_ratio.UpdateRatio.applied

        def spike_add(self: Any, value: float | None) -> Any:
            layer = not self.scored
            window = sorted(self.values)
            out = add(self, value)
            if value is None or value <= 0 or not math.isfinite(value) or len(window) < spikes.MIN_VALUES:
                return out
            median = spikes._middle(window)
            above = math.log(value) - median
            mad = max(1.4826 * spikes._middle(sorted(abs(v - median) for v in window)), 1e-3)
            z = above / mad
            if layer:
                recorder.keep("layer x", math.exp(above))
                if above > math.log(self.ratio):
                    recorder.keep("layer z", z)
            else:
                recorder.keep(getattr(self, "_name", "z"), z)
            return out

        def precursors_judge(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = judge(self, *args, **kwargs)
            for ratio in self.ratios.values():
                recorder.keep("adam", ratio)
            return out

        def ratio_applied(self: Any, step: Any) -> Any:
            taken = self.copies.get(id(step.optimizer))
            out = applied(self, step)
            if taken is not None and self.measurements and self.measurements[-1][1] == taken[0]:
                ratios = self.measurements[-1][2]
                if ratios:
                    if taken[4]:
                        recorder.keep("upd lo", max(ratios.values()), larger=False)
                    recorder.keep("upd hi", sorted(ratios.values())[len(ratios) // 2])
            return out

        spikes.SpikeDetector.add = spike_add
        precursors.Precursors.judge = precursors_judge
        update_ratio.UpdateRatio.applied = ratio_applied

        def undo() -> None:
            spikes.SpikeDetector.add = add
            precursors.Precursors.judge = judge
            update_ratio.UpdateRatio.applied = applied

        self._undo.append(undo)
        return self

    def __exit__(self, *exc: Any) -> None:
        for undo in self._undo:
            undo()


def watched(run: Callable[[], Any]) -> tuple[dict[str, float], list[str]]:
    import gradcli
    from gradcli.watcher import session

    original = session.Watch._watched

    def named(self: Any, optimizer: Any) -> Any:  # the loss's and the gradient norm's detectors, named
        w = original(self, optimizer)
        w.loss_spikes._name, w.grad_spikes._name = "loss z", "grad z"
        return w

    session.Watch._watched = named
    try:
        with Recorder() as recorder, gradcli.watch(health_every=10) as w:
            run()
    finally:
        session.Watch._watched = original
    return recorder.values, [f"{f.kind}@{f.step}" for f in w.result.findings]


COLUMNS = ("loss z", "grad z", "layer z", "layer x", "adam", "upd lo", "upd hi")


def bounds() -> dict[str, float]:
    from gradcli.watcher.detectors.update_ratio import HIGH, LOW
    from gradcli.watcher.options import WatchOptions

    o = WatchOptions()
    return {"loss z": o.spike, "grad z": o.spike, "layer z": o.spike, "layer x": o.spike_ratio,
            "adam": o.adam_ratio, "upd lo": LOW, "upd hi": HIGH}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS))
    parser.add_argument("--corpus", action="store_true", help="also tests/watch_healthy.py's runs (100 steps)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs: list[tuple[str, Callable[[], Any]]] = []
    for model in args.models:
        for opt in args.optimizers:
            for batch in args.batches:
                for seed in args.seeds:
                    runs.append((f"{model} {opt} b{batch} s{seed}",
                                 lambda m=model, o=opt, b=batch, s=seed: grid_run(m, o, b, s, args.steps)))
    if args.corpus:
        import importlib.util

        from watch_healthy import RUNS

        for name, run in RUNS.items():
            if name in ("resnet18",) and importlib.util.find_spec("torchvision") is None:
                continue
            for seed in args.seeds:
                runs.append((f"{name} s{seed}", lambda r=run, s=seed: r(100, s)))
    limit = bounds()
    print(f"{'run':28}" + "".join(f"{c:>10}" for c in COLUMNS) + "  findings")
    print(f"{'(bound)':28}" + "".join(f"{limit[c]:>10.3g}" for c in COLUMNS))
    overall: dict[str, list[float]] = {c: [] for c in COLUMNS}
    started = time.perf_counter()
    for name, run in runs:
        values, findings = watched(run)
        for c in COLUMNS:
            if c in values:
                overall[c].append(values[c])
        print(f"{name:28}" + "".join(f"{values[c]:>10.3g}" if c in values else f"{'-':>10}" for c in COLUMNS)
              + "  " + (", ".join(findings) or "-"), flush=True)
    print(f"{'max (upd lo: min)':28}" + "".join(
        f"{(min(v) if c == 'upd lo' else max(v)):>10.3g}" if v else f"{'-':>10}" for c, v in overall.items()))
    print(f"{len(runs)} runs in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
