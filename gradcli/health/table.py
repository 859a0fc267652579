"""The grads table as data: the judged parameters grouped by module, in forward order.

A row per module (its parameters' norms combined) and a row per parameter. The text and
rich renderers (render/grads.py), the JSON document (health/result.py) and the picture
(plot/grads.py) all read these rows, so the table is enumerated once and below all three.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .flags import FLAG_ORDER

if TYPE_CHECKING:
    from .param import ParamHealth


@dataclass
class Row:
    """One line of the table: a module's summary (level 0) or one of its parameters (1)."""

    level: int
    path: str  # the module's path (summary) or the parameter's name
    label: str
    shape: str
    numel: int
    grad_norm: float | None
    ratio: float | None
    max_abs: float | None
    zero_share: float | None
    flags: str
    steps: list[float | None] | None = None
    mean_abs: float | None = None
    findings: list[str] | None = None  # the flags without counts, for colouring and the plot


def module_key(path: str, depth: int | None) -> str:
    """The module a parameter's row is summarised under at `depth` (None: its own module)."""
    if depth is None:
        return path
    parts = path.split(".") if path else []
    return ".".join(parts[:depth])


def grads_rows(judged: list[ParamHealth], module_types: dict[str, str], depth: int | None = None) -> list[Row]:
    """The judged parameters grouped by module in forward order: a summary row per module,
    then its parameters' rows, unless `depth` folds the module's submodules into it.
    `module_types`: every module's path -> its class name."""
    groups: dict[str, list[ParamHealth]] = {}
    for param in judged:
        groups.setdefault(module_key(param.module, depth), []).append(param)
    rows = []
    for key, params in groups.items():
        folded = depth is not None and any(p.module != key for p in params)
        kind = module_types.get(key, params[0].module_type)
        label = f"{key or '(model)'} ({kind})"
        if folded:
            modules = len({p.module for p in params})
            label += f", {modules} modules folded"
        if not folded and len(params) == 1:  # one parameter: its row is the module's
            p = params[0]
            leaf = p.name[len(key) + 1:] if key else p.name
            rows.append(Row(
                0, key, f"{key + '.' if key else ''}{leaf} ({kind})", "x".join(map(str, p.shape)) or "()", p.numel,
                p.grad_norm, p.ratio, p.max_abs, p.zero_share, ", ".join(p.flags), p.steps, p.mean_abs, p.flags,
            ))
            continue
        rows.append(_summary(key, label, params))
        if not folded:
            for p in params:
                rows.append(Row(
                    1, p.name, p.name[len(key) + 1:] if key else p.name, "x".join(map(str, p.shape)) or "()",
                    p.numel, p.grad_norm, p.ratio, p.max_abs, p.zero_share, ", ".join(p.flags), p.steps,
                    p.mean_abs, p.flags,
                ))
    return rows


def _summary(path: str, label: str, params: list[ParamHealth]) -> Row:
    graded = [p for p in params if p.grad_norm is not None]
    grad_norm = math.sqrt(sum(p.grad_norm**2 for p in graded)) if graded else None
    size = math.sqrt(sum(p.param_norm**2 for p in graded))
    ratio = grad_norm / size if grad_norm is not None and size > 0 and math.isfinite(size) else None
    numel = sum(p.numel for p in params)
    counted = sum(p.numel for p in graded)
    zeros = sum((p.zero_share or 0) * p.numel for p in graded) / counted if counted else None
    max_abs = max((p.max_abs for p in graded if p.max_abs is not None), default=None, key=_nan_first)
    counts = Counter(flag for p in params for flag in p.flags)
    flags = ", ".join(f"{flag} x{counts[flag]}" if counts[flag] > 1 else flag for flag in FLAG_ORDER if counts[flag])
    steps = None
    if all(p.steps is not None for p in params):
        length = len(params[0].steps or [])
        steps = [_combined([p.steps[k] for p in params if p.steps]) for k in range(length)]  # type: ignore[index]
    mean_abs = sum((p.mean_abs or 0) * p.numel for p in graded) / counted if counted else None
    present = [flag for flag in FLAG_ORDER if counts[flag]]
    return Row(0, path, label, "", numel, grad_norm, ratio, max_abs, zeros, flags, steps, mean_abs, present)


def _combined(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return math.sqrt(sum(v * v for v in present)) if present else None


def _nan_first(value: float) -> float:
    return math.inf if math.isnan(value) else value


