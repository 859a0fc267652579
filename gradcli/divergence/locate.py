"""At the parted step, the first module where the two runs part, from the located runs (every
computing module's output and the gradients at its two ends, fingerprinted at that step;
recorder.py), each judged against the band of the same module in the float32 and float64 runs.

As compare locates (comparison/locate.py): a forward parting is the first module in forward
order whose output leaves its band; a backward one the first module in backward order whose
input gradient (for the first layer: its parameters' gradients) leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .band import Band, gap, ratio
from .judge import Phase, StepJudged
from .runs import RunLog


@dataclass
class Where:
    """The module where the runs part, and the user's line that called it."""

    module: str
    module_class: str
    bands: float  # its output's (forward) or input gradient's (backward) distance in bands
    file: str | None
    line: int | None
    code: str | None
    nonfinite: str | None = None  # which run's output at this module is non-finite ("a", "b")

    def as_dict(self) -> dict[str, Any]:
        return {"module": self.module, "module_class": self.module_class, "bands": self.bands,
                "file": self.file, "line": self.line, "code": self.code, "nonfinite": self.nonfinite}


def locate(parted: StepJudged, a: RunLog, b: RunLog, float32: RunLog, float64: RunLog,
           band: Band) -> tuple[Phase, Where | None]:
    """The phase, refined, and the module. A module's output is a finer look at the forward than
    the loss (one mean over the batch): a backward parting whose activations already left their
    band is a forward one."""
    phase: Phase = parted.phase or "forward"
    if any(log.modules is None for log in (a, b, float32, float64)):
        return phase, None
    seen = [{m["path"]: m for m in log.modules or []} for log in (a, b, float32, float64)]
    order = [path for path in seen[0] if all(path in s for s in seen)]
    for path in order:
        found = _judge(path, "output", seen, band)
        if found is not None:
            return "forward", found
    if phase == "forward":
        return phase, None
    return phase, _backward(order, parted, seen, band)


def _backward(order: list[str], parted: StepJudged, seen: list[dict[str, Any]], band: Band) -> Where | None:
    for path in reversed(order):
        found = _judge(path, "input_grad", seen, band)
        if found is not None:
            return found
        own = [v for name, v in parted.layers.items() if name.rpartition(".")[0] == path and v > 1]
        if own and seen[0][path]["input_grad"] is None:  # the first layer: its parameters tell
            return _where(path, seen, max(own))
    return None


def _judge(path: str, key: str, seen: list[dict[str, Any]], band: Band) -> Where | None:
    a, b, x32, x64 = (s[path][key] for s in seen)
    if a is None or b is None or x32 is None or x64 is None:
        return None
    bands = ratio(gap(a, b), band.of(x32, x64))
    return _where(path, seen, bands) if bands > 1 else None


def _where(path: str, seen: list[dict[str, Any]], bands: float) -> Where:
    import math

    m = next((s[path] for s in seen if s[path]["line"] is not None), seen[0][path])
    bad = [side for side, s in zip("ab", seen) if s[path]["output"] is not None and not all(map(math.isfinite, s[path]["output"]))]
    return Where(path, m["cls"], bands, m["file"], m["line"], m["code"], nonfinite=bad[0] if len(bad) == 1 else None)
