"""`gradcli memory --plot memory.png|svg|pdf`: saved bytes by module, in forward order.

One column per module (folded at --depth) in the order forward first ran it: the pale bar is
everything first saved there, the dark bar the activations and autocast copies among it (what
backward alone keeps alive; parameters and inputs live anyway). Modules proven by a
checkpoint trial are marked with what the checkpoint measured. A linear axis: bytes add up,
and the eye should compare them as such.

matplotlib is imported here only, through plot/mpl.py's helpers (Figure, never pyplot).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..words import byte_size as size
from .mpl import picture_format, require_matplotlib, write

if TYPE_CHECKING:
    from ..footprint.result import MemoryResult

PALE, DARK, TRIED = "#c6dbef", "#08519c", "#d94801"
DPI = 110


def save_memory(result: MemoryResult, path: str | Path, depth: int | None = None) -> Path:
    """Draw `result` and write it to `path` (.png, .svg or .pdf)."""
    fmt = picture_format(path)
    return write(memory_figure(result, depth), Path(path), fmt)


def memory_figure(result: MemoryResult, depth: int | None = None) -> Any:
    """The picture of `result` as a matplotlib Figure (not yet written)."""
    require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    totals = result.modules_in_forward_order(depth)
    width = min(max(6.0, 0.32 * len(totals) + 2.5), 24.0)
    fig = Figure(figsize=(width, 4.8), dpi=DPI)
    ax = fig.subplots(1, 1)
    tried = {c.module: c for c in result.checkpoint}
    # One binary unit for the axis, chosen by the largest bar, so that its ticks are round.
    scale, unit = 1, "B"
    for power, name in enumerate(("KiB", "MiB", "GiB"), start=1):
        if max((t.bytes for t in totals), default=0) >= 1024**power:
            scale, unit = 1024**power, name
    for k, total in enumerate(totals):
        ax.bar(k, total.bytes / scale, color=PALE, width=0.8)
        ax.bar(k, total.kept / scale, color=DARK, width=0.4)
        trial = tried.get(total.key)
        if trial is not None:
            freed = trial.saved_bytes_before - trial.saved_bytes_after
            ax.annotate(f"checkpoint\n-{size(freed)}\n{trial.time_ratio:.2f}x time", (k, total.bytes / scale), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=6.5, color=TRIED)
    labels = [t.key or "(model)" for t in totals]
    ax.set_xticks(list(range(len(totals))), labels, rotation=90, fontsize=7)
    ax.set_xlim(-0.6, len(totals) - 0.4)
    ax.set_ylabel(f"saved for backward ({unit})")
    ax.grid(True, axis="y", linewidth=0.4, alpha=0.5)
    if totals:
        ax.set_ylim(0, max(t.bytes for t in totals) / scale * (1.45 if tried else 1.1) or 1)
    legend = [Patch(color=PALE, label="all saved (parameters, inputs too)"), Patch(color=DARK, label="activations")]
    if tried:
        legend.append(Patch(color=TRIED, label="checkpoint trial"))
    ax.legend(handles=legend, fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, frameon=False)
    peak = f", peak {size(result.peak_bytes)}" if result.peak_bytes is not None else ""
    fig.suptitle(f"{result.model}: saved for backward by module, in forward order\n"
                 f"{size(result.kept_bytes)} of activations{peak}", fontsize=10)
    longest = max((len(label) for label in labels), default=8)
    fig.subplots_adjust(left=0.11, right=0.98, top=0.82, bottom=min(0.6, (0.3 + 0.075 * longest) / fig.get_figheight()))
    return fig
