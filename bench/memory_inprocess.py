"""The cost of `gradcli.memory`'s measurement itself, in one process: its forward + backward
(recorder, saved-tensor hooks, node pairing, allocator events) against the same forward +
backward under a hand-written saved_tensors_hooks counter. Start-up is left out on both sides
(bench/run.py's `memory` row includes it, as a user feels it).

    python bench/memory_inprocess.py [--reps 7]

Prints the median seconds of each and their ratio (issue 28's target: at most 1.5x), for the
measurement alone (checkpoint=0, create_graph=False) and for the default run (create_graph
and three checkpoint trials, each a rerun of its own).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mlp24 import MLP24, WIDTH  # noqa: E402

import gradcli  # noqa: E402


def handwritten(model, x):
    sizes = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        sizes[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(x).pow(2).mean()
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(sizes.values())


def timed(fn):
    begun = time.perf_counter()
    fn()
    return time.perf_counter() - begun


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=7)
    reps = parser.parse_args().reps
    torch.manual_seed(0)
    model, x = MLP24(), torch.randn(64, WIDTH)
    loss = lambda out: out.pow(2).mean()  # noqa: E731
    measured = gradcli.memory(model, x, loss=loss, checkpoint=0, create_graph=False)
    assert measured.saved_bytes == handwritten(model, x), "the two counts must agree before timing them"
    rows = {"handwritten": [], "memory": [], "memory_default": []}
    for _ in range(reps):  # interleaved, so that the machine's load falls on all alike
        rows["handwritten"].append(timed(lambda: handwritten(model, x)))
        rows["memory"].append(timed(lambda: gradcli.memory(model, x, loss=loss, checkpoint=0, create_graph=False)))
        rows["memory_default"].append(timed(lambda: gradcli.memory(model, x, loss=loss)))
    base = statistics.median(rows["handwritten"])
    for name, values in rows.items():
        median = statistics.median(values)
        print(f"{name:16s} median {median:.3f} s  ratio {median / base:.2f}x  ({reps} reps)")


if __name__ == "__main__":
    main()
