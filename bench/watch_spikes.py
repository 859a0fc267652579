"""Do watch's spike warnings come before the loss spikes? Healthy runs and runs made to spike.

    python bench/watch_spikes.py              # every run below (a few minutes on 2 cores)
    python bench/watch_spikes.py --only lm    # the runs whose name starts with lm

Three small models that learn something (so that a loss can rise): an MLP classifier of a
fixed random teacher's labels, a CNN with BatchNorm classifying a fixed random convolution's
strongest channel, and a 2-layer Transformer language model of a fixed Markov chain (each
token has 3 likely successors, 10% noise). Each is trained with AdamW (lr 1e-3) for 300 steps
on batches drawn from a generator seeded per step.

Each run is trained twice: once plainly, which gives the truth (the losses, and the first step
at or after the fault whose loss reached twice the mean of the 20 losses before it), and once
under `gradcli.watch()` with its default options (nothing stops), which gives the warnings:
loss_spike, grad_spike, layer_spike and adam_ratio findings. Both runs' losses must be equal
bit for bit (watch reads, it changes nothing), or the bench fails. A run made to spike counts
as warned in time when its first warning at or after the fault came at least one step before
the loss doubled; a warning before the fault, or any warning in a healthy run, is a false alarm.

The faults: `ramp` multiplies the learning rate by 1.05 every step from step 150 (a warmup
that overshoots); `jump` multiplies it once by the factor at step 150; `scaled` multiplies one
batch's inputs by 30 at step 150 (an unnormalised batch); `noise` replaces one batch's tokens
by uniform random tokens; `labels` gives one batch all the same label.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradcli
from gradcli.watcher.session import SPIKES

STEPS = 300
AT = 150
#: The losses the running mean is taken over.
MEAN_OF = 20


@dataclass(frozen=True)
class Run:
    model: str
    fault: str = "none"  # none, ramp, jump, scaled, noise, labels
    factor: float = 1.0
    seed: int = 0

    @property
    def name(self) -> str:
        fault = "" if self.fault == "none" else f" {self.fault}" + (f" x{self.factor:g}" if self.factor != 1 else "")
        return f"{self.model}{fault} (seed {self.seed})"


HEALTHY = [Run(model, seed=seed) for model in ("mlp", "cnn", "lm") for seed in (0, 1)]
SPIKED = [
    Run("lm", "ramp", 1.05, 0), Run("lm", "ramp", 1.05, 1), Run("lm", "ramp", 1.05, 2),
    Run("cnn", "ramp", 1.05, 0), Run("cnn", "ramp", 1.05, 1),
    Run("mlp", "ramp", 1.08, 0), Run("mlp", "ramp", 1.08, 1),
    Run("cnn", "jump", 30, 0), Run("cnn", "jump", 30, 1), Run("lm", "jump", 30, 0),
    Run("mlp", "jump", 100, 0), Run("lm", "jump", 100, 0),
    Run("mlp", "scaled", 30, 0), Run("lm", "noise", 1, 0), Run("mlp", "labels", 1, 0),
]


# -- the three tasks -----------------------------------------------------------------------------
def language_model() -> nn.Module:
    """examples/watch/train.py's small Transformer LM, wider, without dropout, over 32 tokens."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "watch"))
    from train import TinyLM

    return TinyLM(vocab=32, width=64, context=32, hidden=128, dropout=0.0)


def build(run: Run) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(run.seed)
    if run.model == "mlp":
        model: nn.Module = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                                         nn.Linear(128, 10))
    elif run.model == "cnn":
        model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                              nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
    else:
        model = language_model()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)


def batch(run: Run, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(10_000 * run.seed + step)
    teacher = torch.Generator().manual_seed(99)  # the same task whatever the seed
    if run.model == "mlp":
        x = torch.randn(64, 32, generator=g)
        w1, w2 = torch.randn(32, 64, generator=teacher), torch.randn(64, 10, generator=teacher)
        y = (torch.tanh(x @ w1) @ w2).argmax(1)
    elif run.model == "cnn":
        x = torch.randn(32, 1, 12, 12, generator=g)
        kernel = torch.randn(4, 1, 5, 5, generator=teacher)
        y = nn.functional.conv2d(x, kernel, padding=2).relu().mean((2, 3)).argmax(1)
    else:
        successors = torch.randint(0, 32, (32, 3), generator=teacher)
        seq = torch.empty(16, 33, dtype=torch.long)
        seq[:, 0] = torch.randint(0, 32, (16,), generator=g)
        for i in range(1, 33):
            choice = torch.randint(0, 3, (16,), generator=g)
            noisy = torch.rand(16, generator=g) < 0.1
            seq[:, i] = torch.where(noisy, torch.randint(0, 32, (16,), generator=g), successors[seq[:, i - 1], choice])
        x, y = seq[:, :-1], seq[:, 1:]
    if step == AT and run.fault == "scaled":
        x = x * run.factor
    elif step == AT and run.fault == "noise":
        x = torch.randint(0, 32, x.shape, generator=g)
        y = torch.randint(0, 32, y.shape, generator=g)
    elif step == AT and run.fault == "labels":
        y = torch.zeros_like(y)
    return x, y


def train(run: Run) -> list[float]:
    """The user's loop; returns every step's loss."""
    model, optimizer = build(run)
    losses = []
    for step in range(1, STEPS + 1):
        if run.fault == "ramp" and step >= AT or run.fault == "jump" and step == AT:
            for group in optimizer.param_groups:
                group["lr"] *= run.factor
        x, y = batch(run, step)
        optimizer.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
    return losses


# -- one run, both ways ----------------------------------------------------------------------------
@dataclass
class Outcome:
    run: Run
    doubled: int | None  # the first step at or after the fault whose loss reached twice the running mean
    warnings: list[Any] = field(default_factory=list)  # watch's findings of the kinds --stop-on spike stops on
    seconds: float = 0.0

    @property
    def first(self) -> Any:
        start = AT if self.run.fault != "none" else 1
        return next((w for w in self.warnings if w.step >= start), None)

    @property
    def false_alarms(self) -> list[Any]:
        return [w for w in self.warnings if self.run.fault == "none" or w.step < AT]

    @property
    def lead(self) -> int | None:
        return None if self.first is None or self.doubled is None else self.doubled - self.first.step


def doubling_step(losses: list[float], start: int) -> int | None:
    for i in range(max(start - 1, MEAN_OF), len(losses)):
        mean = sum(losses[i - MEAN_OF:i]) / MEAN_OF
        if not math.isfinite(losses[i]) or losses[i] >= 2 * mean:
            return i + 1
    return None


def measure(run: Run) -> Outcome:
    started = time.perf_counter()
    plain = train(run)
    with gradcli.watch() as watch:
        watched = train(run)
    if plain != watched:
        raise SystemExit(f"{run.name}: the watched run's losses differ from the plain run's")
    warnings = [f for f in watch.result.findings if f.kind in SPIKES]
    return Outcome(run, doubling_step(plain, AT if run.fault != "none" else MEAN_OF + 1), warnings,
                   time.perf_counter() - started)


def describe(warning: Any) -> str:
    where = warning.detail.get("layer")
    where = f" {where or 'root'}" if where is not None else ""
    return f"{warning.kind}{where} @{warning.step}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="only the runs whose name starts with this")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = [r for r in HEALTHY + SPIKED if r.name.startswith(args.only)]
    outcomes = []
    for run in runs:
        outcomes.append(measure(run))
        o = outcomes[-1]
        print(f"  {run.name}: doubled at {o.doubled}, warnings {[describe(w) for w in o.warnings[:4]]} "
              f"({o.seconds:.0f} s)", file=sys.stderr, flush=True)
    print("| run | loss doubled at | first warning (at or after step 150) | steps before | false alarms |")
    print("|---|---|---|---|---|")
    for o in outcomes:
        first = describe(o.first) if o.first is not None else "none"
        lead = "-" if o.lead is None else str(o.lead)
        print(f"| {o.run.name} | {o.doubled or 'never'} | {first} | {lead} | {len(o.false_alarms)} |")
    spiked = [o for o in outcomes if o.run.fault != "none" and o.doubled is not None]
    early = [o for o in spiked if o.lead is not None and o.lead >= 1]
    healthy = [o for o in outcomes if o.run.fault == "none"]
    print(f"\nruns made to spike whose loss doubled: {len(spiked)}; warned at least one step before: {len(early)}; "
          f"false alarms: {sum(len(o.false_alarms) for o in spiked)} in them, "
          f"{sum(len(o.false_alarms) for o in healthy)} in {len(healthy)} healthy runs")


if __name__ == "__main__":
    main()
