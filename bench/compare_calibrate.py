"""How `compare`'s tolerance was calibrated (README, "compare's tolerances"): healthy models
(MLP, CNN with BatchNorm, LSTM, Transformer layer) in every candidate setup, over a few seeds,
each parameter's relative error divided by u(precision)·√(n·d), its tolerance at factor 1
(n the reduction, d the backward depth), and elements flushed to zero. Prints the largest ratio per setup; Tolerance.factor must sit above
every one of them with margin.

    python bench/compare_calibrate.py [--seeds 3] [--inductor]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn

from gradcli.comparison.gradients import UNIT_ROUNDOFF
from gradcli.comparison.runs import DTYPES, Runs
from gradcli.comparison.setup import Setup


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.head(self.body(x).flatten(1))


class LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 32, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


MODELS = {"MLP": (MLP, (16, 32)), "CNN+BN": (CNN, (8, 3, 8, 8)), "LSTM": (LSTM, (8, 12, 16)), "Transformer": (Transformer, (8, 10, 32))}


def loss_fn(out):
    return out.pow(2).mean()


def measure(setup: Setup, seeds: int) -> tuple[float, int, float]:
    """The largest rel_err / (u·√(n·d)), the count of flushed elements, and the largest
    relative size (|g_ref| / max|g_ref|) of a flushed element, over models and seeds."""
    worst, flushed, flushed_size = 0.0, 0, 0.0
    where: tuple = ("all exact",)
    for name, (cls, shape) in MODELS.items():
        for seed in range(seeds):
            torch.manual_seed(seed)
            model, x = cls(), torch.randn(shape)
            runs = Runs(model, (x,), {}, loss_fn, torch.random.get_rng_state(), setup, 1.0)
            ref = runs.reference(sized=True)
            runs.sizes = ref.sizes
            try:
                cand = runs.candidate()
            except RuntimeError as err:
                print(f"  {name}: the candidate raised: {str(err).splitlines()[0][:100]}", file=sys.stderr)
                continue
            u = UNIT_ROUNDOFF[DTYPES[setup.precision]]
            for p in runs.judge(ref, cand):
                ratio = p.rel_err / runs.tolerance(p.name)
                if ratio > worst:
                    worst = ratio
                    where = (name, seed, p.name, p.rel_err, runs.reduction(p.name))
                r, c = ref.grads[p.name].double(), cand.grads[p.name].double()
                mask = (c == 0) & (r != 0)
                flushed += int(mask.sum())
                if mask.any():
                    flushed_size = max(flushed_size, float(r[mask].abs().max() / r.abs().max()))
    print(f"  worst at {where}", file=sys.stderr)
    return worst, flushed, flushed_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--inductor", action="store_true")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    setups = {
        "compile aot_eager": Setup(compile=True, backend="aot_eager"),
        "amp bfloat16": Setup(amp="bfloat16"),
        "amp float16 + scaler": Setup(amp="float16", scaler=True),
        "dtype bfloat16": Setup(dtype="bfloat16"),
        "dtype float16": Setup(dtype="float16"),
        "compile aot_eager + amp bfloat16": Setup(compile=True, backend="aot_eager", amp="bfloat16"),
    }
    if args.inductor:
        setups["compile inductor"] = Setup(compile=True, backend="inductor")
        setups["compile inductor + amp bfloat16"] = Setup(compile=True, backend="inductor", amp="bfloat16")
    print("| setup | largest rel_err / (u·√(n·d)) | flushed elements | largest flushed |g|/max|g| | seconds |")
    print("|---|---|---|---|---|")
    for label, setup in setups.items():
        if args.only and args.only not in label:
            continue
        start = time.perf_counter()
        worst, flushed, size = measure(setup, args.seeds)
        print(f"| {label} | {worst:.3g} | {flushed} | {size:.3g} | {time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
