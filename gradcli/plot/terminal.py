"""A coarse plot in characters, for `gradcli plot --terminal`: a quick look without a file.

Each panel is a grid of character cells: x runs across the columns, the value down the
rows (the same y range rule as the pictures, `scale.value_range`). Under each panel a strip
marks the columns holding shaded points: `!` autograd wrong, `~` outside the domain,
`^` beyond the float range, `?` not finite. The glyphs carry the meaning on their own, so
the plot reads the same without colour (NO_COLOR, a pipe); each cell also has a role
("f", "exact", "unstable", ...) that the CLI turns into a colour on a terminal.

This module draws plain data only (no rich): lines are lists of (text, role) segments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data import PlotData
from .scale import value_range
from .shades import derivative_label, shade_label

#: Rows of one panel.
HEIGHT = 12
#: Characters left of the plot for the y labels.
LABEL_WIDTH = 11
#: Strip glyph per kind of shaded range, by priority (a column shows the first that applies).
STRIP = {"unstable": "!", "nonfinite": "?", "overflow": "^", "undefined": "~"}
GLYPHS = {"f": "*", "exact": "o", "autograd": "+", "both": "*"}

Segment = tuple[str, str]  # (text, role); role "" is plain
Line = list[Segment]


@dataclass
class _Grid:
    width: int
    height: int

    def __post_init__(self) -> None:
        self.cells = [[(" ", "")] * self.width for _ in range(self.height)]


def terminal_plot(data: PlotData, width: int = 100) -> list[Line]:
    """The lines of the plot, `width` characters wide at most."""
    columns = max(20, width - LABEL_WIDTH - 1)
    column_of = _columns(data.x, columns)
    lines: list[Line] = [[(f"f({data.variable}) = {data.expression}", "title")]]
    lines += _panel({"f": data.f}, column_of, columns, _strip(data, 0, column_of, columns))
    for curve in data.curves:
        strip = _strip(data, curve.order, column_of, columns)
        label = derivative_label(curve.order, data.variable)
        lines.append([(f"{label}: ", "title"), ("o exact  ", "exact"), ("+ autograd  ", "autograd"),
                      ("* both in the cell", "both")] if curve.exact is not None else [(f"{label} (autograd)", "title")])
        series = {"autograd": curve.autograd} if curve.exact is None else {"exact": curve.exact, "autograd": curve.autograd}
        lines += _panel(series, column_of, columns, strip)
    lines.append(_x_axis(data, columns))
    lines += _legend(data)
    return lines


def plain_text(lines: list[Line]) -> str:
    """The plot without roles (for tests and pipes)."""
    return "\n".join("".join(text for text, _ in line).rstrip() for line in lines) + "\n"


def _columns(x: np.ndarray, columns: int) -> np.ndarray:
    low, high = float(x.min()), float(x.max())
    if high == low:
        return np.full(x.shape, columns // 2, dtype=int)
    return np.clip(np.rint((x - low) / (high - low) * (columns - 1)).astype(int), 0, columns - 1)


def _strip(data: PlotData, order: int, column_of: np.ndarray, columns: int) -> list[Segment]:
    """The marker per column under the panel of derivative `order` (0: f): the most urgent
    kind of shaded point in that column (ranges outside f's domain show under every panel)."""
    marks = [(" ", "")] * columns
    rank = {kind: k for k, kind in enumerate(STRIP)}
    mine = [s for s in data.shades if s.order == order or (s.order == 0 and s.kind == "undefined")]
    for shade in sorted(mine, key=lambda s: -rank[s.kind]):
        inside = (data.x >= shade.first) & (data.x <= shade.last)
        for column in np.unique(column_of[inside]):
            marks[int(column)] = (STRIP[shade.kind], shade.kind)
    return marks


def _panel(series: dict[str, np.ndarray], column_of: np.ndarray, columns: int, strip: list[Segment]) -> list[Line]:
    shown = value_range(list(series.values()))
    grid = _Grid(columns, HEIGHT)
    if shown is None:
        low, high, clipped = 0.0, 1.0, False
    else:
        low, high, clipped = shown
    for role, values in series.items():
        ok = np.isfinite(values) & (values >= low) & (values <= high)
        rows = np.rint((high - values[ok]) / (high - low) * (HEIGHT - 1)).astype(int)
        for row, column in set(zip(rows.tolist(), column_of[ok].tolist())):
            current = grid.cells[row][column][1]
            placed = "both" if current and current != role and role != "f" else role
            grid.cells[row][column] = (GLYPHS[placed], placed)
    lines: list[Line] = []
    for r, row in enumerate(grid.cells):
        label = ""
        if r == 0:
            label = _number(high)
        elif r == HEIGHT - 1:
            label = _number(low)
        lines.append([(f"{label:>{LABEL_WIDTH - 1}} |", "axis"), *row])
    note = "  (y clipped)" if clipped else ""
    lines.append([(" " * (LABEL_WIDTH - 1) + " |", "axis"), *strip, (note, "axis")])
    return lines


def _x_axis(data: PlotData, columns: int) -> Line:
    low, high = _number(float(data.x.min())), _number(float(data.x.max()))
    middle = _number(float((data.x.min() + data.x.max()) / 2))
    gap = columns - len(low) - len(high) - len(middle)
    left = max(1, gap // 2)
    right = max(1, gap - left)
    name = f"{data.variable:>{LABEL_WIDTH - 2}}  "
    return [(name + low + " " * left + middle + " " * right + high, "axis")]


def _legend(data: PlotData) -> list[Line]:
    seen: dict[tuple[str, int], str] = {}
    for shade in data.shades:
        key = (shade.kind, 0 if shade.kind == "undefined" else shade.order)
        seen.setdefault(key, shade_label(shade.kind, key[1], data.variable))
    if not seen:
        return []
    parts: Line = [("marks under the panels: ", "")]
    for (kind, _), text in seen.items():
        parts += [(STRIP[kind], kind), (f" {text}   ", "")]
    return [parts]


def _number(value: float) -> str:
    return f"{value:.4g}"
