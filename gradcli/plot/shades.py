"""Point masks to shaded x ranges: where a plot should tell the reader not to trust a curve.

A mask over sorted x values (outside the domain, autograd wrong, beyond the float range)
becomes runs of consecutive points; each run is drawn as a band that reaches halfway to
the neighbouring points, so a single bad point still has a visible width.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import words

#: What each kind of shaded range means (legend text).
KINDS = {
    "undefined": "outside the domain",
    "unstable": "autograd wrong",
    "overflow": "beyond the float range",
    "nonfinite": "not finite",
}


def shade_label(kind: str, order: int, variable: str) -> str:
    """Legend text of a kind of shaded range: 'autograd wrong (d/dx)', 'f not finite'."""
    if kind == "undefined":
        return KINDS[kind]
    if kind == "nonfinite":
        return "f not finite" if order == 0 else f"autograd {derivative_label(order, variable)} not finite"
    return f"{KINDS[kind]} ({derivative_label(order, variable)})"


def derivative_label(order: int, variable: str) -> str:
    """d/dx, d²/dx²: gradcli.words' label, with the superscripts a picture has room for."""
    return words.derivative_label([variable] * order, superscript=True)


@dataclass(frozen=True)
class Shade:
    """One shaded x range: what is wrong there, for which derivative order, over how many points."""

    kind: str  # a key of KINDS
    order: int  # the derivative order it concerns (0: the function itself)
    start: float  # where the band starts and stops (halfway to the neighbouring points)
    stop: float
    first: float  # the first and last x of the run itself
    last: float
    points: int
    got: str = ""  # what autograd gave there and the exact value, for unstable runs
    exact: str = ""

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index pairs of the runs of True in a 1-D boolean mask."""
    if not mask.any():
        return []
    padded = np.concatenate([[False], mask.astype(bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2])]


def shades(x: np.ndarray, mask: np.ndarray, kind: str, order: int) -> list[Shade]:
    """The runs of `mask` over the sorted `x` as bands."""
    found = []
    for first, last in runs(mask):
        start = _halfway(x, first, -1)
        stop = _halfway(x, last, +1)
        found.append(Shade(kind, order, start, stop, float(x[first]), float(x[last]), last - first + 1))
    return found


def _halfway(x: np.ndarray, index: int, step: int) -> float:
    neighbour = index + step
    if 0 <= neighbour < len(x):
        return float((x[index] + x[neighbour]) / 2)
    # At the ends: mirror the spacing to the inner neighbour (or a unit width for one point).
    inner = index - step
    half = abs(float(x[index] - x[inner])) / 2 if 0 <= inner < len(x) else 0.5
    return float(x[index]) + step * half


def describe_values(values: np.ndarray) -> str:
    """'nan', '1' or 'from -3.2 to 0.5': what a run of values looks like."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return ""
    finite = values[np.isfinite(values)]
    if finite.size < values.size:
        kinds = "/".join(sorted({f"{v:g}" for v in values[~np.isfinite(values)]}))
        return kinds + (f" or finite values {_span(finite)}" if finite.size else "")
    return _span(finite)


def _span(values: np.ndarray) -> str:
    low, high = f"{values.min():.6g}", f"{values.max():.6g}"
    return low if low == high else f"from {low} to {high}"
