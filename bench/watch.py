"""What `gradcli watch` costs a training step, side by side with the same loop unwatched.

    python bench/watch.py                    # the three models, 120 steps per side
    python bench/watch.py --models mlp24 --steps 10 --rounds 20

One process per model; in it, the same loop (zero_grad, forward, loss, backward,
optimizer.step) runs one step at a time on each side in turn: unwatched, under
`gradcli.watch()` with a check every step, and with `every=10`, each side its own run (model
and optimizer built from the same seed, so that every side computes the same numbers at the
same step: the watched runs are bit-identical to the plain one), each side first in turn, for
--rounds x --steps steps per side, so that drift in the machine's load falls on every side
alike (blocks of steps per side measured drift, not watch: Adam's CPU step alone varies from
150 to 260 ms on the 24-layer MLP here). Each step is timed on its own
(perf_counter around the whole step); the figure is the median step time of each side over
all its blocks, and the ratio is watched / unwatched. `gradcli.watch()` is given no model or
optimizer: it finds them as `gradcli watch train.py` does; one watch per side is entered
around each of its steps, so its step counts carry over (every=10 checks one step in ten).
One block of --steps per side warms up first. The models: bench/mlp24.py's 24-layer MLP (width 1024, batch 64, Adam),
torchvision's ResNet-18 (10 classes, 8x3x64x64, SGD with momentum) and a small GPT-2 built
from its config (transformers' GPT2LMHeadModel: 2 layers, width 256, 4 heads, a vocabulary
of 8,192; 4x64 tokens, AdamW), each skipped
with the reason when its package is missing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def mlp24() -> tuple[torch.nn.Module, Any, Callable[[], Any]]:
    from mlp24 import MLP24

    model = MLP24()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(64, 1024)
    return model, optimizer, lambda: model(x).pow(2).mean()


def resnet18() -> tuple[torch.nn.Module, Any, Callable[[], Any]]:
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))
    return model, optimizer, lambda: torch.nn.functional.cross_entropy(model(x), y)


def gpt2() -> tuple[torch.nn.Module, Any, Callable[[], Any]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=8192, bos_token_id=0,
                                       eos_token_id=0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 8192, (4, 64))
    return model, optimizer, lambda: model(input_ids=tokens, labels=tokens).loss


MODELS = {"mlp24": mlp24, "resnet18": resnet18, "gpt2": gpt2}


def block(model: torch.nn.Module, optimizer: Any, loss_fn: Callable[[], Any], steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss_fn().backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return times


def measure(name: str, steps: int, rounds: int) -> dict[str, float]:
    import gradcli

    # Each side is its own run (its own model and optimizer, built from the same seed), stepped
    # one step at a time in turn: a watch sees every step of its run, as in real use (sharing
    # one optimizer between the sides would make the watch miss the other sides' steps, and
    # Adam's step count it follows would then be read again at every check).
    runs = {}
    for side in ("plain", "every 1", "every 10"):
        torch.manual_seed(0)
        runs[side] = MODELS[name]()
    watches = {"every 1": gradcli.watch(health_every=0), "every 10": gradcli.watch(every=10, health_every=0)}
    sides: dict[str, list[float]] = {side: [] for side in runs}
    order = list(sides)
    for run in runs.values():
        block(*run, steps)  # warm-up
    for index in range(rounds * steps):
        for side in order[index % 3:] + order[:index % 3]:  # each side first in turn: drift falls on all
            if side == "plain":
                sides[side] += block(*runs[side], 1)
            else:
                with watches[side]:
                    sides[side] += block(*runs[side], 1)
    assert watches["every 10"].result.checks == rounds * steps // 10
    return {side: statistics.median(times) for side, times in sides.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp24,resnet18,gpt2")
    parser.add_argument("--steps", type=int, default=10, help="steps per block")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds x {args.steps} steps")
    print("| model | median step, unwatched | watch, every step | ratio | watch --every 10 | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        try:
            result = measure(name, args.steps, args.rounds)
        except ImportError as err:
            print(f"| {name} | skipped: {err} | | | | |")
            continue
        plain = result["plain"]
        print(f"| {name} | {plain * 1e3:.2f} ms | {result['every 1'] * 1e3:.2f} ms | {result['every 1'] / plain:.3f} "
              f"| {result['every 10'] * 1e3:.2f} ms | {result['every 10'] / plain:.3f} |", flush=True)


if __name__ == "__main__":
    main()
