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
    def __init__(self, path: Path) -> None:
        self.file = open(path, "w", encoding="utf-8")

    def write(self, optimizer: str, step: int, reading: StepReading, names: list[str],
              loss_z: float | None, grad_z: float | None, ratios: dict[str, float] | None = None) -> None:
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
        self.file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self.file.close()


def json_float(value: float | None) -> float | str | None:
    """A float as JSON can hold it: nan and ±inf become strings."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if value != value else ("inf" if value > 0 else "-inf")
