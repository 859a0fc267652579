"""What one run of `gradcli diverge` costs a training step, beside the same loop unrecorded.

    python bench/diverge.py                            # the 24-layer MLP and GPT-2 from its config
    python bench/diverge.py --models mlp24 --steps 10 --rounds 3

`gradcli diverge` runs each setup in a child process under divergence/recorder.py: the model's
call (the batch's hash), the optimizer's step pre-hook (every gradient's fingerprint: its norm
and its projection on a fixed direction; a large float32 tensor's norm per block of 256, summed in
float64) and post-hook (every parameter's). Here the
same loop (bench/watch.py's models: zero_grad, forward, loss, backward, optimizer.step) runs on
two sides in one process, one step at a time in turn so that the machine's drift falls on both:
plain, and under the recorder (setup `same`, its lines written to /dev/null). The figure is each
side's median step over all rounds (after a warm-up block), the ratio recorded / plain, and the
median time spent inside the recorder's own hooks per step over the plain median.

Not measured here: the two runs side by side (their own processes, as many cores as the machine
gives them), the float64 run that measures the band (a float64 step: about twice a float32 one
on this CPU), and the rerun to the parted step with every module fingerprinted, done only when
the runs part in the forward or the backward.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: The recorder's own work in a step: the two step hooks (every fingerprint) and the batch's hash
#: (the model's call itself, which the recorder wraps, is the model's time, not the recorder's).
HOOKS = ("_pre_step", "_post_step", "batch_hash")


def timed_hooks(spent: list[float]) -> Callable[[], None]:
    """Time every call of the recorder's HOOKS, added to spent[0]; returns the undo."""
    from gradcli.divergence import recorder as module
    from gradcli.divergence.recorder import Recorder

    owners = {name: Recorder if hasattr(Recorder, name) else module for name in HOOKS}
    originals = {name: getattr(owners[name], name) for name in HOOKS}

    def timed(original: Callable[..., Any]) -> Callable[..., Any]:
        def hook(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
        return hook

    for name, original in originals.items():
        setattr(owners[name], name, timed(original))

    def undo() -> None:
        for name, original in originals.items():
            setattr(owners[name], name, original)

    return undo


def step(model_optimizer_loss: tuple[Any, Any, Callable[[], Any]]) -> float:
    _, optimizer, loss_fn = model_optimizer_loss
    start = time.perf_counter()
    optimizer.zero_grad()
    loss_fn().backward()
    optimizer.step()
    return time.perf_counter() - start


def measure(name: str, steps: int, rounds: int) -> dict[str, Any]:
    from watch import MODELS

    from gradcli.divergence.recorder import Recorder
    from gradcli.divergence.setups import RunSetup

    torch.manual_seed(0)
    plain = MODELS[name]()
    torch.manual_seed(0)
    recorded = MODELS[name]()
    out = open(os.devnull, "w", encoding="utf-8")
    recorder = Recorder(RunSetup("same"), out)
    spent = [0.0]
    undo = timed_hooks(spent)
    times: dict[str, list[float]] = {"plain": [], "recorded": []}
    hooks: list[float] = []
    try:
        for r in range(rounds + 1):  # round 0 warms both sides up
            for k in range(steps):
                first = (r + k) % 2  # each side first in turn
                for side in (("plain", "recorded") if first == 0 else ("recorded", "plain")):
                    if side == "plain":
                        t = step(plain)
                    else:
                        spent[0] = 0.0
                        with recorder:
                            t = step(recorded)
                        if r:
                            hooks.append(spent[0])
                    if r:
                        times[side].append(t)
    finally:
        undo()
        out.close()
    base = statistics.median(times["plain"])
    return {"model": name, "plain_ms": 1e3 * base, "recorded_ms": 1e3 * statistics.median(times["recorded"]),
            "ratio": statistics.median(times["recorded"]) / base, "hooks_share": statistics.median(hooks) / base,
            "steps": len(times["plain"])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["mlp24", "gpt2"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    print("| model | plain step (median) | recorded step (median) | recorded / plain | recorder's hooks / plain step |")
    print("| --- | --- | --- | --- | --- |")
    for name in opts.models:
        try:
            row = measure(name, opts.steps, opts.rounds)
        except ImportError as err:
            print(f"| {name} | skipped: {err} | | | |")
            continue
        print(f"| {row['model']} | {row['plain_ms']:.1f} ms | {row['recorded_ms']:.1f} ms | {row['ratio']:.3f} | "
              f"{100 * row['hooks_share']:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
