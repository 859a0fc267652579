"""Findings on a step's real gradients: `grads`' verdicts, read from what the check already has.

Every checked step: a parameter the optimizer holds that got no gradient (never used, or cut
from the graph), and one whose gradient is exactly zero on DEAD_CHECKS checked steps in a row
(a layer killed, e.g. a ReLU whose bias keeps it off), from the norms the check read anyway.
One exact zero is no verdict: a bias under an L1-like loss gets exactly 0 whenever the signs of
its batch's errors balance (seen on the sqrt loss of examples/watch/train.py at step 7); three
in a row did not happen on any healthy run of the tests. A dead finding is reported at the
first step of its run of zeros. Every `--health-every` checked
steps: VANISHING and EXPLODING by grads' own rules (health/verdicts.py, ‖grad‖/‖param‖
against absolute bounds and the model's median), which needs the parameters' norms too: one
more reduction and host read on those steps only. A bias whose gradient is a shift the loss
removes (in front of a BatchNorm, detectors/shifted_bias.py) is neither dead nor VANISHING: it is a note. Each (kind, parameter) is reported once,
at the first step it is seen.
"""

from __future__ import annotations

import math

import torch

from .detectors.found import Found
from .reading import StepReading
from .detectors.shifted_bias import shifted
from .spikes import Spike

#: Checked steps in a row with an exactly-zero gradient that make a parameter dead.
DEAD_CHECKS = 3


def every_step(reading: StepReading, names: list[str], reported: set[tuple[str, str]],
               zeros: dict[str, int], step: int) -> list[Found]:
    """No gradient, and dead; `zeros` maps a parameter to the first step of its run of zero
    gradients (kept between steps)."""
    found: list[Found] = []
    missing = [name for name, norm in zip(names, reading.norms) if norm is None and ("no_gradient", name) not in reported]
    if missing:
        reported.update(("no_gradient", name) for name in missing)
        found.append(Found("no_gradient", missing, {}))
    runs: dict[int, list[str]] = {}
    spared: set[str] | None = None  # biases whose zero is a shift the loss removes (detectors/shifted_bias.py)
    for name, norm in zip(names, reading.norms):
        if norm == 0.0 and name.endswith(".bias"):
            if spared is None:
                spared = set(shifted(names, reading.norms, [n for n, v in zip(names, reading.norms) if v == 0.0]))
            norm = None if name in spared else norm
        if norm != 0.0:
            zeros.pop(name, None)
            continue
        since = zeros.setdefault(name, step)
        if ("dead", name) not in reported and _checks_between(since, step) >= DEAD_CHECKS:
            runs.setdefault(since, []).append(name)
    for since, hit in sorted(runs.items()):
        reported.update(("dead", name) for name in hit)
        found.append(Found("dead", hit, {}, since))
    return found


def overflowing_norms(reading: StepReading, names: list[str], reported: set[tuple[str, str]]) -> Found:
    """Gradients whose every element is finite but whose norm is not: the sum of squares passed
    the dtype's largest value (float32: 3.4e38, elements above ~1.8e19). EXPLODING, whatever the
    weights' size."""
    hit = [name for name, norm in zip(names, reading.norms) if norm is not None and not math.isfinite(norm)]
    reported.update(("exploding", name) for name in hit)
    return Found("exploding", hit, {"norm": float("inf")})


def _checks_between(first: int, step: int) -> int:
    return step - first + 1


def spike_finding(kind: str, spike: Spike, reading: StepReading | None = None,
                  names: list[str] | None = None) -> Found:
    parameters: list[str] = []
    if reading is not None and names is not None:  # the parameter whose gradient grew the most
        norms = [(n, name) for name, n in zip(names, reading.norms) if n is not None and math.isfinite(n)]
        if norms:
            parameters = [max(norms)[1]]
    return Found(kind, parameters, {"value": spike.value, "median": spike.median, "z": round(spike.z, 1)})


def sizes(params: list[torch.Tensor], reading: StepReading, names: list[str],
          owners: dict[str, tuple[str, str]], reported: set[tuple[str, str]]) -> list[Found]:
    """VANISHING / EXPLODING by grads' rules on this step's gradients."""
    from ..health.result import ParamHealth
    from ..health.thresholds import Thresholds
    from ..health.verdicts import judge_sizes, median_ratio

    with torch.no_grad():
        norms = torch.stack([torch.linalg.vector_norm(p.detach()).float() for p in params]).tolist()
    by_module: dict[str, float] = {}
    for name, norm in zip(names, norms):
        module = owners.get(name, ("", ""))[0]
        by_module[module] = by_module.get(module, 0.0) + norm * norm
    rows = []
    for p, name, norm, grad in zip(params, names, norms, reading.norms):
        if grad is None or grad == 0.0 or not math.isfinite(grad):
            continue
        module, cls = owners.get(name, ("", ""))
        reference = norm if norm > 0 else math.sqrt(by_module.get(module, 0.0))
        rows.append(ParamHealth(name=name, module=module, module_type=cls, shape=tuple(p.shape), numel=p.numel(),
                                frozen=False, order=None, param_norm=norm, reference_norm=reference, grad_norm=grad))
    judge_sizes(rows, Thresholds(), median_ratio(rows))
    found: list[Found] = []
    for flag in ("VANISHING", "EXPLODING"):
        kind = flag.lower()
        hit = [r.name for r in rows if flag in r.flags and (kind, r.name) not in reported]
        if flag == "VANISHING" and hit:  # a bias in front of a BatchNorm: a note (detectors/shifted_bias.py)
            spared = set(shifted(names, reading.norms, hit))
            hit = [name for name in hit if name not in spared]
        if hit:
            reported.update((kind, name) for name in hit)
            found.append(Found(kind, hit, {}))
    return found
