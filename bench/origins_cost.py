"""What it costs to know each node's line: anomaly mode's tracebacks vs gradcli's recorder.

    python bench/origins_cost.py

Runs the forward of bench/model.py's DeepMLP (4,956 backward nodes) five ways, in one
process, and prints the median CPU seconds of each (process time, 7 runs): plain; under
`torch.autograd.detect_anomaly()` (every node gets `metadata["traceback_"]`, the whole
formatted stack); under gradcli's ForwardRecorder (a TorchFunctionMode walking frames to the
first user line, plus module hooks), without and with the non-finite check of --flow; and
under `grads`' ForwardObserver (a TorchFunctionMode that counts operations and notes cuts and
activations, with no frame walk per call), the other forward watcher (bench/README.md item 11).
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from model import model_and_loss  # noqa: E402

from gradcli.health.observe import ForwardObserver  # noqa: E402
from gradcli.targets.record import ForwardRecorder  # noqa: E402


def timed(make) -> float:
    runs = []
    for _ in range(7):
        start = time.process_time()
        make()
        runs.append(time.process_time() - start)
    return statistics.median(runs)


def with_recorder(watch: bool) -> None:
    torch.manual_seed(0)
    from model import DeepMLP

    model = DeepMLP()
    names = {id(m): p for p, m in model.named_modules()}
    with ForwardRecorder(names, watch_nonfinite=watch):
        model(torch.randn(8, 16)).pow(2).mean()


def with_observer() -> None:
    torch.manual_seed(0)
    from model import DeepMLP

    model = DeepMLP()
    with ForwardObserver(model):
        model(torch.randn(8, 16)).pow(2).mean()


def with_anomaly() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly(check_nan=False):
            model_and_loss()


if __name__ == "__main__":
    figures = {
        "plain forward (construction included)": timed(model_and_loss),
        "detect_anomaly (traceback_ on every node)": timed(with_anomaly),
        "gradcli recorder": timed(lambda: with_recorder(False)),
        "gradcli recorder + non-finite check (--flow)": timed(lambda: with_recorder(True)),
        "grads' observer (ForwardObserver)": timed(with_observer),
    }
    base = figures["plain forward (construction included)"]
    for what, seconds in figures.items():
        print(f"{what:48s} {seconds:.3f} s  {seconds / base:.2f}x")
