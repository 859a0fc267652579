"""`gradcli grads` for people: the table (grouped by module, in forward order), the frozen
parameters apart, the findings, the verdict.

Renderer contract: a result in, what to print out (`grads_text` a plain string, used by
`str(result)` and the library; `grads_renderables` rich objects, for the CLI on a
terminal). Both read the same rows (`grads_rows`), so the table is enumerated once.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..health.flags import FLAG_ORDER

if TYPE_CHECKING:
    from ..health.result import GradsResult, ParamHealth

HEADERS = ("module / parameter", "shape", "numel", "‖grad‖", "‖grad‖/‖param‖", "max |grad|", "zeros", "flags")
SPARKS = "▁▂▃▄▅▆▇█"


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

    def cells(self) -> list[str]:
        return [
            ("  " * self.level) + self.label, self.shape, f"{self.numel:,}", number(self.grad_norm),
            number(self.ratio), number(self.max_abs), percent(self.zero_share), self.flags,
        ]


def number(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return "0" if value == 0 else f"{value:.3g}"


def percent(share: float | None) -> str:
    if share is None:
        return "-"
    if share in (0.0, 1.0):
        return f"{share:.0%}"
    return f"{share:.1%}"


def sparkline(values: list[float | None]) -> str:
    """‖grad‖ across steps on a log scale: one block per step, '·' for none, '!' for nan/inf,
    '_' for exactly 0."""
    logs = [math.log10(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    low, high = (min(logs), max(logs)) if logs else (0.0, 0.0)
    marks = []
    for v in values:
        if v is None:
            marks.append("·")
        elif not math.isfinite(v):
            marks.append("!")
        elif v == 0:
            marks.append("_")
        else:
            level = 0 if high == low else round((math.log10(v) - low) / (high - low) * (len(SPARKS) - 1))
            marks.append(SPARKS[level])
    return "".join(marks)


def module_key(path: str, depth: int | None) -> str:
    """The module a parameter's row is summarised under at `depth` (None: its own module)."""
    if depth is None:
        return path
    parts = path.split(".") if path else []
    return ".".join(parts[:depth])


def grads_rows(result: GradsResult, depth: int | None = None) -> list[Row]:
    """The judged parameters grouped by module in forward order: a summary row per module,
    then its parameters' rows, unless `depth` folds the module's submodules into it."""
    groups: dict[str, list[ParamHealth]] = {}
    for param in result.judged:
        groups.setdefault(module_key(param.module, depth), []).append(param)
    rows = []
    for key, params in groups.items():
        folded = depth is not None and any(p.module != key for p in params)
        kind = result.module_types.get(key, params[0].module_type)
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


def frozen_lines(result: GradsResult) -> list[str]:
    """requires_grad=False parameters, by module: listed apart, not judged."""
    groups: dict[str, list[ParamHealth]] = {}
    for p in result.frozen:
        groups.setdefault(p.module, []).append(p)
    return [
        f"{key or '(model)'} ({ps[0].module_type}): {', '.join(p.name.rpartition('.')[2] for p in ps)} "
        f"({sum(p.numel for p in ps):,} elements)"
        for key, ps in groups.items()
    ]


def finding_lines(result: GradsResult) -> list[str]:
    """Each finding once, with every parameter that has it: `a.weight, a.bias: FLAG: reason`."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for flag in FLAG_ORDER:
        for p in result.judged:
            for f in p.findings:
                if f.flag == flag:
                    grouped.setdefault((flag, f.reason), []).append(p.name)
    lines = []
    if result.error:
        lines += [f"backward raised: {result.error}",
                  "gradcli trace with the same target and options explains it, with the lines of your code"]
    for (flag, reason), names in grouped.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        failing = "" if result.failing(flag) else " (warning)"
        lines.append(f"{shown}: {flag}{failing}: {reason}")
    return lines


def verdict(result: GradsResult) -> str:
    judged = result.judged
    if result.error:
        return "PROBLEM: backward raised an error, so no parameter got a gradient"
    failing = Counter(flag for p in judged for f in p.findings if result.failing(flag := f.flag))
    if failing:
        counts = ", ".join(f"{failing[flag]} {flag}" for flag in FLAG_ORDER if failing[flag])
        return f"PROBLEM: {counts} (of {len(judged)} parameters that should learn)"
    warned = sum(1 for p in judged if p.findings)
    tail = f"; {warned} with warnings (failing only with --strict)" if warned else ""
    return f"OK: all {len(judged)} parameters that should learn get a finite gradient{tail}"


def header_line(result: GradsResult) -> str:
    judged, frozen = result.judged, result.frozen
    parts = [f"{len(judged)} parameters ({sum(p.numel for p in judged):,} elements)"]
    if frozen:
        parts.append(f"{len(frozen)} frozen")
    return f"grads {result.model}: loss {number(result.loss)}, " + ", ".join(parts) + ", in forward order"


def footer_lines(result: GradsResult) -> list[str]:
    t = result.thresholds
    median = number(result.median_ratio) if result.median_ratio is not None else "- (fewer than 3 ratios)"
    lines = [f"median ‖grad‖/‖param‖ {median}; VANISHING below {t.vanish:g} or {t.spread:g}x under the median, "
             f"EXPLODING above {t.explode:g} or {t.spread:g}x over it"]
    if result.steps is not None:
        losses = " ".join(number(v) for v in result.steps.losses)
        lines.append(f"{result.steps.count} SGD steps (lr {result.steps.lr:g}) on a copy, same batch; losses: {losses}")
    lines += [f"note: {n}" for n in result.notes]
    return lines


def grads_text(result: GradsResult, depth: int | None = None) -> str:
    """The whole report as plain text (a fixed-width table), for str(result) and pipes."""
    rows = grads_rows(result, depth)
    steps = result.steps is not None
    table = [list(HEADERS) + (["steps"] if steps else [])]
    for row in rows:
        table.append(row.cells() + ([sparkline(row.steps) if row.steps else ""] if steps else []))
    widths = [max(len(line[k]) for line in table) for k in range(len(table[0]))]
    right = {2, 3, 4, 5, 6}
    lines = [header_line(result), ""]
    for line in table:
        cells = [c.rjust(w) if k in right else c.ljust(w) for k, (c, w) in enumerate(zip(line, widths))]
        lines.append("  ".join(cells).rstrip())
    if result.frozen:
        lines += ["", "Frozen (requires_grad=False, not judged):"] + [f"  {line}" for line in frozen_lines(result)]
    findings = finding_lines(result)
    if findings:
        lines += ["", "Findings:"] + [f"  {line}" for line in findings]
    lines += [""] + footer_lines(result) + [verdict(result)]
    return "\n".join(lines)


def grads_renderables(result: GradsResult, depth: int | None = None) -> list[Any]:
    """The report as rich objects: the table with flagged rows coloured, then the text."""
    from rich.table import Table
    from rich.text import Text

    steps = result.steps is not None
    table = Table(box=None, pad_edge=False)
    for k, name in enumerate(HEADERS + (("steps",) if steps else ())):
        # Only the labels and the flags may wrap: numbers are never cut to an ellipsis.
        table.add_column(name, justify="right" if k in (2, 3, 4, 5, 6) else "left", no_wrap=k not in (0, 7),
                         overflow="fold")
    for row in grads_rows(result, depth):
        cells = row.cells() + ([sparkline(row.steps) if row.steps else ""] if steps else [])
        style = _style(row.flags)
        table.add_row(*cells, style=("bold " + style if style else "bold") if row.level == 0 else style)
    out: list[Any] = [Text(header_line(result)), table]
    if result.frozen:
        out += [Text(""), Text("Frozen (requires_grad=False, not judged):")]
        out += [Text(f"  {line}", style="dim") for line in frozen_lines(result)]
    findings = finding_lines(result)
    if findings:
        out += [Text(""), Text("Findings:")]
        out += [Text(f"  {line}", style=_style(line)) for line in findings]
    out += [Text("")] + [Text(line) for line in footer_lines(result)]
    out.append(Text(verdict(result), style="bold red" if not result.ok else "bold green"))
    return out


def _style(flags: str) -> str:
    if "NONFINITE" in flags or "NO GRAD" in flags:
        return "red"
    return "yellow" if any(flag in flags for flag in FLAG_ORDER) else ""
