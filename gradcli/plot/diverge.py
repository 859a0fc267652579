"""`gradcli diverge --plot run.png|svg|pdf`: how the gap between the two runs grew.

Two panels over the steps: the loss of both runs, and each parameter's gradient distance in
bands (log scale, one line per parameter) with the band itself at 1, so that the layer that
leaves it first and how fast the gap grows after it read at a glance. The parting step is
marked on both.

matplotlib is imported here only, through plot/mpl.py's helpers (Figure, never pyplot).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .mpl import picture_format, require_matplotlib, write

if TYPE_CHECKING:
    from ..divergence.result import DivergeResult

DPI = 110
MARK = "#d94801"
#: A distance of exactly 0 (the runs agree bit for bit) is drawn at this floor of the log scale.
FLOOR = 1e-3


def draw_diverge(result: DivergeResult, path: str | Path) -> Path:
    fmt = picture_format(path)
    return write(diverge_figure(result), Path(path), fmt)


def diverge_figure(result: DivergeResult) -> Any:
    require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    steps = [s.step for s in result.steps]
    fig = Figure(figsize=(9.0, 6.0), dpi=DPI, layout="constrained")
    loss_ax, band_ax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1, 1.4]})
    for k, (label, colour) in enumerate(((f"a: {result.a.text}", "#08519c"), (f"b: {result.b.text}", "#a50f15"))):
        loss_ax.plot(steps, [_finite(s.loss[k]) for s in result.steps], color=colour, lw=1.2 if k else 2.4,
                     alpha=1.0 if k else 0.45, label=label)
    loss_ax.set_ylabel("loss")
    loss_ax.legend(loc="upper right", fontsize=8)
    names = list(dict.fromkeys(name for s in result.steps for name in s.layers))
    for name in names:
        band_ax.plot(steps, [max(_finite(s.layers.get(name)) or 0.0, FLOOR) for s in result.steps], lw=1, label=name)
    band_ax.axhline(1.0, color="0.3", ls="--", lw=1, label="the band")
    band_ax.set_yscale("log")
    band_ax.set_ylabel("gradient distance (bands)")
    band_ax.set_xlabel("optimizer step (a distance of 0, the runs equal bit for bit, is drawn at 0.001)")
    band_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    band_ax.legend(loc="upper left", fontsize=7, ncol=2)
    if result.parted_at is not None:
        for ax in (loss_ax, band_ax):
            ax.axvline(result.parted_at.step, color=MARK, lw=1)
        where = f" at {result.where.module}" if result.where else ""
        fig.suptitle(f"{result.script}: parted at step {result.parted_at.step}, in the {result.parted}{where}", fontsize=10)
    else:
        fig.suptitle(f"{result.script}: within the band over {len(steps)} steps", fontsize=10)
    return fig


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
