"""`gradcli compare --plot`: each layer's relative gradient error against its tolerance.

One point per layer (a module's parameters together: their worst relative error), in the
reference's order, on a log scale, with the tolerance as a shaded band under a line: points
above the line leave tolerance, coloured by their flag. An error of exactly 0 (aot_eager
replays eager's ops) sits on the axis's floor with a label, since a log axis has no 0.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..comparison.result import CompareResult
from .mpl import picture_format, require_matplotlib, write

COLOURS = {"AGREES": "#08519c", "DIFFERS": "#d94801", "UNDERFLOW": "#6a51a3", "OVERFLOW": "#a63603", "MISSING": "#cb181d"}
DPI = 110


def layers(result: CompareResult) -> list[tuple[str, float | None, float, str]]:
    """(module, worst rel err, loosest tolerance, worst flag) per module, in order."""
    from ..comparison.gradients import severity

    groups: dict[str, list[Any]] = {}
    for p in result.parameters:
        groups.setdefault(result.modules.get(p.name, ""), []).append(p)
    out = []
    for path, params in groups.items():
        errs = [p.rel_err for p in params if p.rel_err is not None]
        flag = min((f.value for p in params for f in p.flags), key=severity)
        out.append((path or "(model)", max(errs) if errs else None, max(p.tolerance for p in params), flag))
    return out


def save_compare(result: CompareResult, path: str | Path) -> Path:
    fmt = picture_format(path)
    return write(compare_figure(result), Path(path), fmt)


def compare_figure(result: CompareResult) -> Any:
    require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    rows = layers(result)
    values = [v for _, v, _, _ in rows if v is not None and math.isfinite(v) and v > 0] + [t for _, _, t, _ in rows]
    floor = min(values) / 100 if values else 1e-12
    width = min(max(6.0, 0.32 * len(rows) + 2.5), 24.0)
    fig = Figure(figsize=(width, 4.8), dpi=DPI)
    ax = fig.subplots(1, 1)
    xs = list(range(len(rows)))
    tolerances = [t for _, _, t, _ in rows]
    ax.fill_between(xs, floor, tolerances, step="mid", color="#c7e9c0", alpha=0.6, label="within tolerance")
    ax.step(xs, tolerances, where="mid", color="#238b45", linewidth=1.0)
    for k, (_, err, _, flag) in enumerate(rows):
        if err is None:
            ax.annotate(flag, (k, floor), xytext=(0, 4), textcoords="offset points", rotation=90, ha="center", fontsize=8, color=COLOURS[flag])
        elif not math.isfinite(err):
            ax.annotate("nan/inf", (k, floor), xytext=(0, 4), textcoords="offset points", rotation=90, ha="center", fontsize=8, color=COLOURS[flag])
        elif err == 0:
            ax.plot(k, floor, marker="v", color=COLOURS[flag])
        else:
            ax.plot(k, err, marker="o", color=COLOURS[flag])
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor)
    ax.set_xticks(xs, [name for name, _, _, _ in rows], rotation=90, fontsize=7)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylabel("‖g − g_ref‖ / ‖g_ref‖ (log)")
    ax.grid(True, axis="y", linewidth=0.4, alpha=0.5)
    shown = {flag for *_, flag in rows}
    handles = [Line2D([], [], marker="o", linestyle="", color=COLOURS[f], label=f) for f in COLOURS if f in shown]
    handles.append(Line2D([], [], color="#238b45", label="tolerance"))
    ax.legend(handles=handles, fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(handles), frameon=False)
    fig.suptitle(f"{result.model}: {result.setup.describe()} vs eager {result.setup.reference}, per layer", fontsize=10)
    longest = max((len(name) for name, *_ in rows), default=8)
    fig.subplots_adjust(bottom=min(0.6, 0.1 + 0.012 * longest), top=0.85)
    return fig
