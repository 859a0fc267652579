"""What `gradcli watch` costs a training step, side by side with the same loop unwatched.

    python bench/watch.py                    # the three models
    python bench/watch.py --models mlp24 --steps 10 --rounds 4

One process per model; in it, the same loop (zero_grad, forward, loss, backward,
optimizer.step) runs on three sides: unwatched, under `gradcli.watch()` with a check every
step, and with `every=10`. Each side steps its own run (model and optimizer built from the same
seed, so every run computes the same numbers at the same step: the watched runs are
bit-identical to the plain one), one step at a time on each side in turn, each side first in
turn, so that drift in the machine's load falls on every side alike (blocks of steps per side
measured drift, not watch: Adam's CPU step alone varies from 150 to 260 ms on the 24-layer MLP
here).

Three identical runs stepped in turn, none watched, differ by themselves: their median step
times were 3 to 4% apart on this machine, the same in every round (where each run's tensors
landed in memory), as large as what watch costs. So the measurement is made in three trials,
the runs swapping sides between them (a Latin square: each run is unwatched in one trial,
checked every step in another, every 10 steps in the third), and each run's own speed falls
on every side alike. Each trial enters new watches and warms up one block of --steps per side
first (a watch's first step finds the models, its first check reads Adam's state).

Each step is timed on its own (perf_counter around the whole step); the figure is the median
step time of each side over all trials, and the ratio is watched / unwatched; the trials' own
ratios show the spread. Beside it, the time spent inside watch's own hooks (the optimizer's
step pre- and post-hooks, which hold the check, and the model's call hooks), timed around each
and summed per step: its median over the measured steps (as the step's: at every 10 that is an
unchecked step) and its mean, each over the unwatched median step. That is what watch adds,
without the machine's noise (it leaves out what the hooks do to the caches, which the
side-by-side ratio keeps, and counts as watch's the frees it only moves). `gradcli.watch()` is given no model or optimizer: it finds them as
`gradcli watch train.py` does; one watch per side is entered around each of its steps, so its
step counts carry over (every=10 checks one step in ten). The models: bench/mlp24.py's
24-layer MLP (width 1024, batch 64, Adam), torchvision's ResNet-18 (10 classes, 8x3x64x64, SGD
with momentum) and a small GPT-2 built from its config (transformers' GPT2LMHeadModel: 2
layers, width 256, 4 heads, a vocabulary of 8,192; 4x64 tokens, AdamW), each skipped with the
reason when its package is missing.
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


SIDES = ("plain", "every 1", "every 10")
#: The Watch methods that run inside a step: the optimizer's step hooks (the check), the model's
#: call hooks, and check_step (a trainer's callback calls it instead of the step pre-hook).
HOOKS = ("_pre_step", "_post_step", "_enter", "_leave", "check_step")


def timed_hooks(spent: dict[int, float]) -> Callable[[], None]:
    """Time every call of the HOOKS, summed per watch (by id) into `spent`; returns the undo."""
    from gradcli.watcher.session import Watch

    originals = {name: getattr(Watch, name) for name in HOOKS}

    def timed(original: Callable[..., Any]) -> Callable[..., Any]:
        def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                spent[id(self)] = spent.get(id(self), 0.0) + time.perf_counter() - start
        return hook

    for name, original in originals.items():
        setattr(Watch, name, timed(original))

    def undo() -> None:
        for name, original in originals.items():
            setattr(Watch, name, original)

    return undo


def measure(name: str, steps: int, rounds: int) -> dict[str, Any]:
    import gradcli

    # Each side steps its own run, one step at a time in turn: a watch sees every step of its
    # run, as in real use (sharing one optimizer between the sides would make the watch miss the
    # other sides' steps, and Adam's step count it follows would then be read again at every check).
    runs = []
    for _ in SIDES:
        torch.manual_seed(0)
        runs.append(MODELS[name]())
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    trials: list[dict[str, float]] = []
    spent: dict[int, float] = {}
    hooks: dict[str, list[float]] = {side: [] for side in SIDES[1:]}  # seconds inside the hooks, per measured step
    undo = timed_hooks(spent)
    for trial in range(len(SIDES)):  # run (i + trial) % 3 is side i's in this trial
        cast = {side: runs[(i + trial) % len(runs)] for i, side in enumerate(SIDES)}
        watches = {"every 1": gradcli.watch(health_every=0), "every 10": gradcli.watch(every=10, health_every=0)}
        own: dict[str, list[float]] = {side: [] for side in SIDES}
        for index in range((rounds + 1) * steps):  # the first block is the warm-up
            for side in SIDES[index % 3:] + SIDES[:index % 3]:  # each side first in turn: drift falls on all
                if side == "plain":
                    taken = block(*cast[side], 1)
                else:
                    before = spent.get(id(watches[side]), 0.0)
                    with watches[side]:
                        taken = block(*cast[side], 1)
                    if index >= steps:
                        hooks[side].append(spent[id(watches[side])] - before)
                if index >= steps:  # the first block warmed up
                    own[side] += taken
        assert watches["every 10"].result.checks == (rounds + 1) * steps // 10
        for side in SIDES:
            times[side] += own[side]
        plain = statistics.median(own["plain"])
        trials.append({side: statistics.median(own[side]) / plain for side in SIDES[1:]})
    undo()
    result: dict[str, Any] = {side: statistics.median(taken) for side, taken in times.items()}
    result["trials"] = trials
    result["hooks"] = {side: (statistics.median(each), statistics.fmean(each)) for side, each in hooks.items()}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp24,resnet18,gpt2")
    parser.add_argument("--steps", type=int, default=10, help="steps per block")
    parser.add_argument("--rounds", type=int, default=4, help="blocks measured per trial (three trials)")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, 3 trials x {args.rounds} rounds x {args.steps}"
          " steps per side")
    print("| model | median step, unwatched | watch, every step | ratio (trials) | in its hooks, median (mean) "
          "| watch --every 10 | ratio (trials) | in its hooks, median (mean) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        try:
            result = measure(name, args.steps, args.rounds)
        except ImportError as err:
            print(f"| {name} | skipped: {err} | | | | | | |")
            continue
        plain = result["plain"]
        cells = [f"{result[side] * 1e3:.2f} ms | {result[side] / plain:.3f} ("
                 + ", ".join(f"{trial[side]:.3f}" for trial in result["trials"]) + ") | "
                 + "{:.2f} ms, {:.3f} ({:.2f} ms, {:.3f})".format(*(x for h in result["hooks"][side] for x in (h * 1e3, 1 + h / plain)))
                 for side in SIDES[1:]]
        print(f"| {name} | {plain * 1e3:.2f} ms | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
