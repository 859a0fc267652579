"""`gradcli grads` for people: the table (grouped by module, in forward order), the frozen
parameters apart, the findings, the verdict.

Renderer contract: a result in, what to print out: `grads_renderables`, rich objects that the
text format (render/text.py) hands to the CLI's console, and to `str(result)` laid out as on a
pipe. The rows are health/table.py's `grads_rows`, which plot/grads.py draws too, so the
table is enumerated once.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..health.flags import FLAG_ORDER
from ..health.table import Row, grads_rows

if TYPE_CHECKING:
    from ..health.result import GradsResult, ParamHealth

HEADERS = ("module / parameter", "shape", "numel", "‖grad‖", "‖grad‖/‖param‖", "max |grad|", "zeros", "flags")
SPARKS = "▁▂▃▄▅▆▇█"


def row_cells(row: Row) -> list[str]:
    """A row's table cells as text."""
    return [
        ("  " * row.level) + row.label, row.shape, f"{row.numel:,}", number(row.grad_norm),
        number(row.ratio), number(row.max_abs), percent(row.zero_share), row.flags,
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
    if result.loss_finding is not None:
        lines.append(f"loss: {result.loss_finding.flag}: {result.loss_finding.reason}")
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
    loss = f"the loss is {result.loss}" if result.loss_finding is not None else ""
    if failing:
        counts = ", ".join(f"{failing[flag]} {flag}" for flag in FLAG_ORDER if failing[flag])
        return f"PROBLEM: {counts} (of {len(judged)} parameters that should learn)" + (f"; {loss}" if loss else "")
    if loss:
        return f"PROBLEM: {loss}, though all {len(judged)} parameters that should learn get a finite gradient"
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


def grads_renderables(result: GradsResult) -> list[Any]:
    """The report as rich objects: the table with flagged rows coloured, then the text."""
    from rich.table import Table
    from rich.text import Text

    steps = result.steps is not None
    table = Table(box=None, pad_edge=False)
    for k, name in enumerate(HEADERS + (("steps",) if steps else ())):
        # Only the labels and the flags may wrap: numbers are never cut to an ellipsis.
        table.add_column(name, justify="right" if k in (2, 3, 4, 5, 6) else "left", no_wrap=k not in (0, 7),
                         overflow="fold")
    for row in grads_rows(result.judged, result.module_types, result.depth):
        cells = row_cells(row) + ([sparkline(row.steps) if row.steps else ""] if steps else [])
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
