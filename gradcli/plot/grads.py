"""`gradcli grads --plot grads.png|svg|pdf`: the plot_grad_flow picture, done right.

Per layer (a module's parameters together, in forward order, folded at --depth): max |grad|
as a pale bar and mean |grad| as a dark one, on a log scale, so that layers a thousand
times apart are both visible. Flagged layers are coloured by their worst flag; a layer with
no gradient, or an all-zero one, gets a labelled marker on the axis instead of a bar of
height 0 (which a log axis cannot draw and a linear one hides). With --steps a second panel
draws each layer's ‖grad‖ across the SGD steps.

matplotlib is imported here only, through plot/mpl.py's helpers (Figure, never pyplot).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..health.table import Row, grads_rows

if TYPE_CHECKING:
    from ..health.result import GradsResult
from .mpl import picture_format, require_matplotlib, write

FLAG_COLOURS = {
    "NONFINITE": ("#fdae6b", "#a63603"), "NO GRAD": ("#fcbba1", "#cb181d"), "ZERO": ("#fcbba1", "#cb181d"),
    "EXPLODING": ("#dadaeb", "#6a51a3"), "VANISHING": ("#fdd0a2", "#d94801"),
}
HEALTHY = ("#c6dbef", "#08519c")
DPI = 110


def save_grads(result: GradsResult, path: str | Path) -> Path:
    """Draw `result` and write it to `path` (.png, .svg or .pdf)."""
    fmt = picture_format(path)
    return write(grads_figure(result), Path(path), fmt)


def grads_figure(result: GradsResult) -> Any:
    """The picture of `result` as a matplotlib Figure (not yet written)."""
    require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    layers = [row for row in grads_rows(result.judged, result.module_types, result.depth) if row.level == 0]
    steps = result.steps is not None
    width = min(max(6.0, 0.32 * len(layers) + 2.5), 24.0)
    fig = Figure(figsize=(width, 7.5 if steps else 4.8), dpi=DPI)
    axes = fig.subplots(2, 1, height_ratios=[3, 2]) if steps else [fig.subplots(1, 1)]
    bars = axes[0]
    positions = range(len(layers))
    finite = [v for row in layers for v in (row.max_abs, row.mean_abs) if _drawable(v)]
    floor = min(finite) / 10 if finite else 1e-8
    for k, row in enumerate(layers):
        pale, dark = _colours(row)
        if _drawable(row.max_abs):
            bars.bar(k, row.max_abs, color=pale, width=0.8, bottom=floor)
        if _drawable(row.mean_abs):
            bars.bar(k, row.mean_abs, color=dark, width=0.4, bottom=floor)
        mark = _marker(row)
        if mark:  # a hatched column where there is no bar to draw, so the layer cannot be missed
            bars.axvspan(k - 0.4, k + 0.4, facecolor="none", edgecolor=pale, hatch="///", linewidth=0)
            bars.annotate(mark, (k, floor), xytext=(0, 4), textcoords="offset points", rotation=90,
                          ha="center", va="bottom", fontsize=8, color=dark, fontweight="bold")
    bars.set_yscale("log")
    bars.set_ylim(bottom=floor)
    bars.set_xticks(list(positions), [row.path or "(model)" for row in layers], rotation=90, fontsize=7)
    bars.set_xlim(-0.6, len(layers) - 0.4)
    bars.set_ylabel("|grad| (log)")
    bars.grid(True, axis="y", linewidth=0.4, alpha=0.5)
    legend = [Patch(color=HEALTHY[0], label="max |grad|"), Patch(color=HEALTHY[1], label="mean |grad|")]
    shown = {flag for row in layers for flag in (row.findings or [])}
    legend += [Patch(color=FLAG_COLOURS[flag][1], label=flag) for flag in FLAG_COLOURS if flag in shown]
    bars.legend(handles=legend, fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(legend), frameon=False)
    fig.suptitle(f"{result.model}: |grad| per layer, in forward order (loss {result.loss:.3g})", fontsize=10)
    if steps:
        _steps_panel(axes[1], layers)
    # Room below the bars for the longest layer name (rotated), from its length in
    # characters rather than matplotlib's layout engine (the legend above the axes confuses it).
    longest = max((len(row.path or "(model)") for row in layers), default=8)
    label = 0.3 + 0.075 * longest  # inches
    height = fig.get_figheight()
    if steps:
        top, bottom = 0.92, 0.07
        average = ((top - bottom) * height - label) / 2  # inches per panel, roughly
        # left: room for five-character tick labels (0.092) beside the axis title
        fig.subplots_adjust(left=0.135, right=0.98, top=top, bottom=bottom, hspace=label / average)
    else:
        fig.subplots_adjust(left=0.11, right=0.98, top=0.86, bottom=min(0.6, label / height))
    return fig


def _steps_panel(ax: Any, layers: list[Row]) -> None:
    drawn = 0
    for row in layers:
        values = [v if _drawable(v) else math.nan for v in (row.steps or [])]
        if any(not math.isnan(v) for v in values):
            ax.plot(range(1, len(values) + 1), values, linewidth=1, marker=".", label=row.path or "(model)")
            drawn += 1
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    count = max((len(row.steps or []) for row in layers), default=1)
    broken = [k + 1 for row in layers for k, v in enumerate(row.steps or []) if v is not None and not math.isfinite(v)]
    if broken:  # where the lines stop: the gradient became nan or inf
        ax.axvspan(min(broken) - 0.5, count + 0.5, color=FLAG_COLOURS["NONFINITE"][0], alpha=0.5, label="nan/inf")
        drawn += 1
    ax.set_xlim(0.5, count + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_yscale("log")
    # ‖grad‖ often moves less than a decade over a few steps; matplotlib then labels minor
    # ticks as 1.25×10^0, wider than the margin, and the labels and the axis title were cut off.
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.3g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: _minor_label(ax, value)))
    ax.set_xlabel("SGD step")
    ax.set_ylabel("‖grad‖ per layer (log)")
    ax.grid(True, linewidth=0.4, alpha=0.5)
    if 0 < drawn <= 12:
        ax.legend(fontsize=7, ncol=3)


def _minor_label(ax: Any, value: float) -> str:
    """Minor ticks are labelled only when the axis spans less than a decade (no power of ten
    to read the scale from), as plain numbers."""
    low, high = ax.get_ylim()
    return f"{value:.3g}" if 0 < low and high / low < 10 else ""


def _drawable(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def _colours(row: Row) -> tuple[str, str]:
    for flag in FLAG_COLOURS:
        if flag in (row.findings or []):
            return FLAG_COLOURS[flag]
    return HEALTHY


def _marker(row: Row) -> str:
    """A label on the axis where a bar cannot show the truth."""
    if row.grad_norm is None:
        return "no grad"
    if not math.isfinite(row.grad_norm):
        return "nan/inf"
    if row.grad_norm == 0:
        return "all 0"
    return ""
