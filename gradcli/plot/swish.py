"""The picture of `gradcli demo swish --plot`: Swish and its derivative for several β.

The curves are those of the demo itself: f from the demo's `Swish` autograd Function
(gradcli.demos.swish_function) and f' from its hand-written backward, drawn over the exact
derivative that the check machinery gives for the library's `swish(x, beta=β)` (sympy,
evaluated vectorised; `plot_data`). A backward that is right lies on the exact curve.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

#: The β drawn besides the demo's own (0.5 is smoother, 1 is SiLU, large β approaches relu).
BETAS = (0.5, 1.0, 2.0, 5.0)
#: The x axis: σ(βx) has saturated beyond |x| = 6 for the β drawn.
X_AXIS = "linspace(-6, 6, 601)"


@dataclass
class SwishCurve:
    beta: float
    x: np.ndarray
    f: np.ndarray  # Swish.apply(x, beta)
    backward: np.ndarray  # the Function's backward
    exact: np.ndarray  # sympy's derivative of x*sigmoid(beta*x)
    max_abs_err: float  # |backward - exact|, largest over x


def betas_for(beta: float) -> list[float]:
    """BETAS with the demo's β among them, in order."""
    return sorted({*BETAS, float(beta)})


def swish_curves(betas: Sequence[float]) -> list[SwishCurve]:
    """The demo Function's values and gradients for each β, with the exact derivative."""
    import torch

    from ..demos.swish_function import Swish
    from .data import plot_data

    curves = []
    for beta in betas:
        data = plot_data(f"swish(x, beta={beta!r})", [f"x={X_AXIS}"])
        x = torch.tensor(data.x, dtype=torch.float64, requires_grad=True)
        y = Swish.apply(x, beta)
        (grad,) = torch.autograd.grad(y.sum(), x)
        exact = data.curves[0].exact
        assert exact is not None  # swish's derivative is always found symbolically
        backward = grad.numpy()
        curves.append(SwishCurve(beta, data.x, y.detach().numpy(), backward, exact,
                                 float(np.max(np.abs(backward - exact)))))
    return curves


def check_path(path: str | Path) -> None:
    """Refuse a path that is not .png/.svg/.pdf, or a missing matplotlib (cheap: before the demo)."""
    from .mpl import picture_format, require_matplotlib

    picture_format(path)
    require_matplotlib()


def save_swish(path: str | Path, beta: float = 1.0) -> Path:
    """Draw Swish and its derivative for BETAS and `beta` to `path` (.png/.svg/.pdf)."""
    from .mpl import picture_format, write

    check_path(path)
    from matplotlib.figure import Figure

    curves = swish_curves(betas_for(beta))
    fig = Figure(figsize=(10.0, 4.6), dpi=120)
    left, right = fig.subplots(1, 2, sharex=True)
    fig.subplots_adjust(left=0.06, right=0.985, top=0.86, bottom=0.11, wspace=0.14)
    colours = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02"]
    for curve, colour in zip(curves, colours):
        width = 2.4 if curve.beta == beta else 1.3
        left.plot(curve.x, curve.f, color=colour, linewidth=width, label=f"β = {curve.beta:g}")
        right.plot(curve.x, curve.exact, color=colour, linewidth=5, alpha=0.3, solid_capstyle="butt")
        right.plot(curve.x, curve.backward, color=colour, linewidth=width * 0.6, linestyle=(0, (4, 2)),
                   label=f"β = {curve.beta:g}  (max |error| {curve.max_abs_err:.1e})")
    left.set_title("Swish f(x) = x·σ(βx)  (Swish.apply)", fontsize=10)
    right.set_title("f′(x): Swish's backward (dashed) over sympy's exact (wide)", fontsize=10)
    left.legend(fontsize=8, loc="upper left")
    right.legend(fontsize=7, loc="upper left")
    for ax in (left, right):
        ax.grid(True, linewidth=0.4, alpha=0.5)
        ax.set_xlabel("x")
        ax.axhline(0, color="0.5", linewidth=0.6)
    fig.suptitle("gradcli demo swish: Swish and its derivative for several β "
                 f"(the demo runs β = {beta:g})", fontsize=11)
    return write(fig, Path(path), picture_format(path))
