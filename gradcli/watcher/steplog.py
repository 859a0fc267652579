"""`--log PATH`: one JSON line per checked step, for pandas (`read_json(path, lines=True)`)
and for `--plot` (plot/watch.py): the loss, the gradient norm, each module's gradient norm
(the root of its parameters' squared norms), the spike statistic of both, and each layer's Σg²
over Adam's Σv̂ (precursors.py; empty under other optimizers and before a parameter's tenth
Adam update)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .names import module_of
from .reading import StepReading


class StepLog:
    """The step records' writer: to `path` (--log), and to each tracker (trackers.py) with the
    findings of `result` made since the last record."""

    def __init__(self, path: Path | None, trackers: list[Any] | None = None, result: Any = None) -> None:
        self.file = open(path, "w", encoding="utf-8") if path is not None else None
        self.trackers = trackers if trackers is not None else []
        self.result = result
        self._told = len(result.findings) if result is not None else 0  # findings already given to the trackers

    def write(self, optimizer: str, step: int, reading: StepReading, names: list[str],
              loss_z: float | None, grad_z: float | None, ratios: dict[str, float] | None = None) -> None:
        findings = self.result.findings[self._told:] if self.result is not None and self.trackers else []
        self._told += len(findings)
        told = [t for t in self.trackers if findings or t.wants(step)]
        if self.file is None and not told:  # no record built for a step nobody writes
            return
        record = step_record(optimizer, step, reading, names, loss_z, grad_z, ratios)
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
        for tracker in told:
            tracker.step(record, findings)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        for tracker in self.trackers:
            tracker.close()


def step_record(optimizer: str, step: int, reading: StepReading, names: list[str], loss_z: float | None,
                grad_z: float | None, ratios: dict[str, float] | None = None) -> dict[str, Any]:
    """One checked step as the log's JSON record."""
    layers: dict[str, float] = {}
    for name, norm in zip(names, reading.norms):
        if norm is not None:
            module = module_of(name) or ""
            layers[module] = layers.get(module, 0.0) + norm * norm
    record: dict[str, Any] = {
        "step": step, "optimizer": optimizer, "loss": json_float(reading.loss),
        "grad_norm": json_float(reading.grad_norm), "loss_z": json_float(loss_z), "grad_z": json_float(grad_z),
        "layers": {k: json_float(math.sqrt(v)) for k, v in layers.items()},
        "adam_ratios": {k: json_float(v) for k, v in (ratios or {}).items()},
    }
    return record


def json_float(value: float | None) -> float | str | None:
    """A float as JSON can hold it: nan and ±inf become strings."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if value != value else ("inf" if value > 0 else "-inf")
