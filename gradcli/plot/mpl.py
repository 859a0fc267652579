"""Draw a PlotData with matplotlib: three panels sharing the x axis, saved as .png/.svg/.pdf.

1. f(x);  2. the derivatives: the exact one (sympy, 50 digits where float64 is in doubt)
as a wide pale line and autograd's as a thin dark dashed line on top, so that agreement
reads as one line and a gap shows both;  3. |autograd - exact| on a log scale with the
tolerance it is held to. Shaded bands mark x ranges outside the domain, where autograd is
wrong, and where the exact value is beyond the float range; dotted lines mark kinks.

matplotlib is an optional extra (`pip install gradcli[plot]`), imported only here and
only when a picture is asked for. The figure is made with `matplotlib.figure.Figure`,
never pyplot, so no GUI backend or display is involved and no global state is touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from .data import Curve, PlotData
from .scale import value_range
from .shades import derivative_label, shade_label

#: Picture suffixes matplotlib writes here.
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
INSTALL_HINT = "install the plotting extra: pip install 'gradcli[plot]' (or pip install matplotlib)"

#: Band colours by kind (autograd-wrong bands of the second derivative are a lighter red).
SHADE_COLOURS = {"undefined": "0.6", "unstable": "tab:red", "overflow": "tab:purple", "nonfinite": "tab:orange"}
#: (exact, autograd) colours by derivative order.
CURVE_COLOURS = {1: ("#9ecae1", "#08306b"), 2: ("#fdae6b", "#7f2704")}
DPI = 120


def require_matplotlib() -> Any:
    """The matplotlib module; a UsageError saying how to install it when it is missing."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError("pictures need matplotlib, which is not installed", hint=INSTALL_HINT) from None
    return matplotlib


def picture_format(path: str | Path) -> str:
    """The format for `path` from its suffix; a UsageError for anything else."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise UsageError(
            f"cannot tell the picture format of '{path}' from its suffix {suffix or '(none)'!r}",
            hint="name the file .png, .svg or .pdf",
        )
    return FORMATS[suffix]


def save(data: PlotData, path: str | Path) -> Path:
    """Draw `data` and write it to `path` (.png, .svg or .pdf)."""
    fmt = picture_format(path)
    require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 8.5), dpi=DPI)
    top, middle, bottom = fig.subplots(3, 1, sharex=True, height_ratios=[2, 2.2, 1.6])
    # Fixed margins: matplotlib's constrained layout measures every tick label and costs
    # about as much as the drawing itself.
    fig.subplots_adjust(left=0.11, right=0.975, top=0.945, bottom=0.12 if data.shades else 0.065, hspace=0.08)
    _function_panel(top, data)
    _derivative_panel(middle, data)
    _difference_panel(bottom, data)
    for ax in (top, middle, bottom):
        _shade(ax, data)
        ax.grid(True, linewidth=0.4, alpha=0.5)
    bottom.set_xlabel(data.variable)
    _shade_legend(fig, data)
    fig.suptitle(_title(data), fontsize=11)
    return write(fig, Path(path), fmt)


def write(fig: Any, path: Path, fmt: str) -> Path:
    import matplotlib

    try:
        # A fixed salt makes the SVG's element ids the same on every run.
        with matplotlib.rc_context({"svg.hashsalt": "gradcli"}):
            fig.savefig(path, format=fmt, metadata=_metadata(fmt))
    except OSError as err:
        raise UsageError(f"cannot write the picture '{path}': {err.strerror or err}") from None
    return path


def _metadata(fmt: str) -> dict[str, Any]:
    # No creation date: the same command gives the same file (the README pictures stay stable).
    if fmt == "png":
        return {"Software": "gradcli"}
    if fmt == "svg":
        return {"Date": None, "Creator": "gradcli"}
    return {"CreationDate": None, "Creator": "gradcli"}


def _title(data: PlotData) -> str:
    fixed = ", ".join(f"{k} = {v:g}" for k, v in data.fixed.items())
    return f"{data.expression}" + (f"   ({fixed})" if fixed else "") + f"   [{data.dtype}]"


def _finite(values: np.ndarray) -> np.ndarray:
    """Values with inf as nan: matplotlib breaks the line there instead of scaling to inf."""
    return np.where(np.isfinite(values), values, np.nan)


def _function_panel(ax: Any, data: PlotData) -> None:
    ax.plot(data.x, _finite(data.f), color="black", linewidth=1.3, label=f"f({data.variable})")
    _robust_ylim(ax, [data.f])
    ax.set_ylabel(f"f({data.variable})")
    ax.legend(loc="upper left", fontsize=8)


def _derivative_panel(ax: Any, data: PlotData) -> None:
    shown = []
    for curve in data.curves:
        pale, dark = CURVE_COLOURS[curve.order]
        label = derivative_label(curve.order, data.variable)
        if curve.exact is not None:
            ax.plot(data.x, _finite(curve.exact), color=pale, linewidth=4.5, solid_capstyle="butt",
                    label=f"{label} exact (sympy)")
            shown.append(curve.exact)
        ax.plot(data.x, _finite(curve.autograd), color=dark, linewidth=1.1, linestyle=(0, (4, 2)),
                label=f"{label} autograd")
        shown.append(curve.autograd)
    for kink in data.kinks:
        ax.axvline(kink, color="0.3", linewidth=0.8, linestyle=":")
    _robust_ylim(ax, shown)
    ax.set_ylabel("derivative")
    ax.legend(loc="upper left", fontsize=8)


def _difference_panel(ax: Any, data: PlotData) -> None:
    ax.set_yscale("log")
    ax.set_ylabel("|autograd − exact|")
    curves = [c for c in data.curves if c.difference is not None]
    if not curves:
        ax.text(0.5, 0.5, "no exact derivative (the symbolic side was skipped)", transform=ax.transAxes,
                ha="center", va="center", fontsize=9)
        return
    floor = _floor(curves)
    any_zero = False
    for curve in curves:
        pale, dark = CURVE_COLOURS[curve.order]
        label = derivative_label(curve.order, data.variable)
        diff = curve.difference
        zero = diff == 0
        any_zero |= bool(zero.any())
        # Dots, not a line: roundoff differences jump between 0 and 1e-17 from point to point.
        ax.plot(data.x, np.where(zero, floor, _finite(diff)), color=dark, linestyle="none", marker=".",
                markersize=2, label=label)
        ax.plot(data.x, _finite(curve.tolerance), color=dark, linewidth=0.8, linestyle=":", alpha=0.7,
                label=f"{label} tolerance")
        # Where autograd is nan/inf but the exact value is a number there is no difference to
        # draw: a row of crosses along the top says so.
        lost = ~np.isfinite(curve.autograd) & np.isfinite(curve.exact)
        if lost.any():
            ax.plot(data.x[lost], np.full(int(lost.sum()), 0.95), linestyle="none", marker="x", markersize=3,
                    color=dark, transform=ax.get_xaxis_transform(), label=f"{label} autograd nan/inf")
    if any_zero:
        ax.text(0.995, 0.03, f"differences of exactly 0 drawn at {floor:.0e}", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=7, color="0.35")
    ax.legend(loc="upper left", fontsize=7, ncols=2)


def _floor(curves: list[Curve]) -> float:
    """Where a difference of exactly 0 is drawn on the log scale: below every real value."""
    positive = [c.difference[(c.difference > 0) & np.isfinite(c.difference)] for c in curves]
    positive += [c.tolerance[(c.tolerance > 0) & np.isfinite(c.tolerance)] for c in curves]
    values = np.concatenate(positive) if positive else np.array([])
    smallest = float(values.min()) if values.size else 1e-16
    return 10.0 ** (np.floor(np.log10(smallest)) - 1)


def _robust_ylim(ax: Any, arrays: list[np.ndarray]) -> None:
    """Limits that keep the bulk of the curve readable when a few values are huge (1/x at 0)."""
    shown = value_range(arrays)
    if shown is None:
        return
    low, high, clipped = shown
    ax.set_ylim(low, high)
    if clipped:
        ax.text(0.995, 0.03, "y clipped to the bulk of the values", transform=ax.transAxes, ha="right",
                va="bottom", fontsize=7, color="0.35")


def _shade(ax: Any, data: PlotData) -> None:
    for shade in data.shades:
        colour = SHADE_COLOURS[shade.kind]
        alpha = 0.18 if shade.order <= 1 else 0.10
        hatch = "//" if shade.order == 2 else None
        ax.axvspan(shade.start, shade.stop, color=colour, alpha=alpha, hatch=hatch, linewidth=0)


def _shade_legend(fig: Any, data: PlotData) -> None:
    """One legend entry per kind and order of shaded range, under the panels."""
    from matplotlib.patches import Patch

    seen: dict[tuple[str, int], Any] = {}
    for shade in data.shades:
        key = (shade.kind, 0 if shade.kind == "undefined" else shade.order)
        if key in seen:
            continue
        what = shade_label(shade.kind, shade.order, data.variable)
        seen[key] = Patch(facecolor=SHADE_COLOURS[shade.kind], alpha=0.3 if shade.order <= 1 else 0.2,
                          hatch="//" if shade.order == 2 else None, label=what)
    if seen:
        fig.legend(handles=list(seen.values()), loc="lower center", ncols=min(len(seen), 4), fontsize=8,
                   title="shaded x ranges", title_fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.0))
