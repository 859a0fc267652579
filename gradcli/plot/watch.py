"""`gradcli watch --plot run.png|svg|pdf`: the picture of a watched run's log.

Three panels over the checked steps: the loss, the global gradient norm (log scales: both
move by factors), and a heat map of each module's gradient norm (log10, one row per module,
in the order they first appear; nan or inf in red), so that the layer that spikes or dies
stands out from the one global number. Flagged steps (a finding, the stop) are marked on
every panel.

matplotlib is imported here only, through plot/mpl.py's helpers (Figure, never pyplot).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .mpl import picture_format, require_matplotlib, write

if TYPE_CHECKING:
    from ..watcher.result import WatchResult

DPI = 110
MARK = "#d94801"


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The JSON lines of `--log` (each: step, optimizer, loss, grad_norm, loss_z, grad_z, layers, adam_ratios)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def draw_watch_log(log: str | Path, path: str | Path, result: "WatchResult | None" = None) -> Path:
    fmt = picture_format(path)
    return write(watch_figure(read_log(log), result), Path(path), fmt)


def watch_figure(records: list[dict[str, Any]], result: "WatchResult | None" = None) -> Any:
    require_matplotlib()
    import numpy as np
    from matplotlib.figure import Figure

    steps = [r["step"] for r in records]
    modules: list[str] = []
    for r in records:
        modules += [m for m in r["layers"] if m not in modules]
    fig = Figure(figsize=(9.0, 7.5), dpi=DPI, layout="constrained")
    loss_ax, norm_ax, heat_ax = fig.subplots(3, 1, sharex=True, gridspec_kw={"height_ratios": [1, 1, 1.4]})
    loss_ax.plot(steps, [_value(r["loss"]) for r in records], color="#08519c", lw=1)
    loss_ax.set_ylabel("loss")
    norm_ax.plot(steps, [_value(r["grad_norm"]) for r in records], color="#238b45", lw=1)
    norm_ax.set_ylabel("‖grad‖")
    for ax, key in ((loss_ax, "loss"), (norm_ax, "grad_norm")):
        if all(v > 0 for v in (_value(r[key]) for r in records) if math.isfinite(v)):
            ax.set_yscale("log")
    grid = np.full((max(len(modules), 1), max(len(records), 1)), np.nan)
    bad = np.zeros(grid.shape, dtype=bool)  # a module whose gradient norm is nan or inf there
    for j, r in enumerate(records):
        for i, m in enumerate(modules):
            v = _value(r["layers"].get(m))
            if math.isfinite(v) and v > 0:
                grid[i, j] = math.log10(v)
            bad[i, j] = m in r["layers"] and not math.isfinite(v)
    lo, hi = (steps[0], steps[-1]) if steps else (0, 1)
    extent = (lo - 0.5, hi + 0.5, len(modules) - 0.5, -0.5)
    image = heat_ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis", extent=extent)
    if bad.any():
        from matplotlib.colors import ListedColormap

        heat_ax.imshow(np.ma.masked_where(~bad, bad.astype(float)), aspect="auto", interpolation="nearest",
                       cmap=ListedColormap([MARK]), extent=extent)
    heat_ax.set_yticks(range(len(modules)), [m or "(model)" for m in modules], fontsize=7)
    heat_ax.set_xlabel("optimizer step")
    # One colorbar beside all three panels, so that they keep the same width and their steps line up.
    fig.colorbar(image, ax=[loss_ax, norm_ax, heat_ax], label="log10 ‖grad‖ of the module", shrink=0.4,
                 anchor=(0.0, 0.0), pad=0.01)
    flagged = _flagged(result)
    for ax in (loss_ax, norm_ax, heat_ax):
        for step, label in flagged:
            ax.axvline(step, color=MARK, lw=0.8, ls="--")
    for step, label in flagged:
        loss_ax.annotate(label, (step, 1.0), xycoords=("data", "axes fraction"), fontsize=7, color=MARK,
                         rotation=90, va="top", ha="right")
    title = "gradcli watch" + (f": {Path(result.script).name}" if result is not None and result.script else "")
    fig.suptitle(title, fontsize=11)
    return fig


def _flagged(result: "WatchResult | None") -> list[tuple[int, str]]:
    if result is None:
        return []
    by_step: dict[int, list[str]] = {}
    for f in result.findings:
        by_step.setdefault(f.step, []).append(f.kind.replace("_", " "))
    if result.stop is not None:
        by_step.setdefault(result.stop.step, []).append(f"stop: {result.stop.kind.replace('_', ' ')}")
    return [(step, ", ".join(dict.fromkeys(labels))) for step, labels in sorted(by_step.items())]


def _value(value: Any) -> float:
    if value is None:
        return math.nan
    if isinstance(value, str):  # "nan", "inf", "-inf"
        return float(value)
    return float(value)
