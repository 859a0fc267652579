"""The curves of `gradcli plot` as plain data: f, autograd's and the exact derivatives, their gap.

Everything is computed by the check machinery, through its one public function
`gradcli.exact.evaluation.evaluate`: autograd per element, sympy's derivative of the same
AST evaluated on every point, the domain and kink masks, and the comparison that arbitrates
doubtful points at 50 digits. What this module adds
is the per-point "exact" curve a picture needs: the float64 value of the formula, replaced
by the 50-digit value wherever the comparison had to arbitrate (log(1+exp(x)) at x > 709.78,
where the float64 formula is nan too but the derivative is 1), and the masks turned into
shaded x ranges. Renderers (mpl.py, terminal.py) read the result; nothing here draws.

    >>> data = plot_data("log(1+exp(x))", ["x=linspace(-800, 800, 2001)"])
    >>> [(s.kind, round(s.first, 1)) for s in data.shades]
    [('unstable', 710.4)]
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..errors import LimitError, UsageError
from ..outcome import Problem, Reported
from ..words import problem_sentences
from ..pipeline import load
from ..interpret.variables import default_spec, make_leaves, parse_var, resolve_dtype
from ..exact.arbitrate import UNDEFINED, sample
from ..exact.compare import Comparison, Target
from ..exact.evaluation import TOLERANCES, check_order, evaluate
from ..exact.plan import Plan, make_plan
from ..exact.problems import comparison_problems
from .shades import Shade, describe_values, shades

#: The x axis when no --var gives one (a library call uses its entry's domain instead).
DEFAULT_AXIS = "linspace(-5, 5, 1001)"
#: Points on the x axis at most: a picture is a few thousand pixels wide.
MAX_PLOT_POINTS = 1_000_000
#: Kinks drawn as vertical lines at most (beyond that they are only counted).
MAX_KINK_LINES = 50


@dataclass
class Curve:
    """One derivative order: autograd's values, the exact values, and how far apart they are."""

    order: int
    formula: str | None  # sympy's derivative as printed (None if the symbolic side was skipped)
    autograd: np.ndarray
    exact: np.ndarray | None  # nan where the derivative is undefined
    difference: np.ndarray | None  # |autograd - exact|; nan where it cannot be computed
    tolerance: np.ndarray | None  # atol + rtol*|exact|: a difference above it is a wrong value
    comparison: Comparison | None


@dataclass
class PlotData(Reported):
    """The x axis, f, the derivative curves and the shaded ranges of one plot (outcome.py's
    protocol: autograd wrong against the exact derivative is a problem)."""

    expression: str
    variable: str
    x: np.ndarray  # sorted
    f: np.ndarray
    curves: list[Curve]
    shades: list[Shade]
    kinks: list[float]
    fixed: dict[str, float]  # the other variables, held at these values
    dtype: str
    axis_source: str  # how the x values were given, e.g. "x=linspace(-3,3,101) (--var)"
    notes: list[str] = field(default_factory=list)
    causes: list[Any] = field(default_factory=list)  # why autograd is wrong where it is (verify/causes/at_points.py)

    @property
    def problems(self) -> list[Problem]:
        """Where autograd disagreed with the exact derivative (defined points only), as check
        says it (its wrong ranges, or that it differs)."""
        return [p for curve in self.curves if curve.comparison is not None for p in comparison_problems(curve.comparison)]

    def as_dict(self) -> dict[str, Any]:
        """`gradcli plot --json` (docs/json.md): what the picture shows, without the curves'
        values (a picture of up to a million points; `check --json` has the numbers)."""
        return {
            "expression": self.expression, "variable": self.variable, "points": int(self.x.size),
            "axis_source": self.axis_source, "dtype": self.dtype, "fixed": self.fixed, "ok": self.ok,
            "curves": [{"order": c.order, "formula": c.formula,
                        "comparison": None if c.comparison is None else c.comparison.as_dict()} for c in self.curves],
            "shades": [s.as_dict() for s in self.shades], "kinks": self.kinks,
            "problems": problem_sentences(self.problems), "notes": self.notes,
        }


def plot_data(
    expression: str,
    var: Sequence[str] = (),
    *,
    order: int = 1,
    dtype: str = "float64",
    seed: int | None = None,
    library_dirs: Sequence[Any] = (),
) -> PlotData:
    """The plot of `expression` over its one varying variable (see the module docstring)."""
    check_order(order)
    torch_dtype = resolve_dtype(dtype)
    program, library = load(expression, library_dirs)
    plan = make_plan(program, library)
    if plan.mode not in ("elementwise", "reduced"):
        raise UsageError(
            f"plot draws elementwise functions of one variable; {', '.join(plan.coupling)} couple the elements",
            hint="`gradcli check` compares such gradients exactly on small tensors",
        )
    names = list(program.variables)
    if not names:
        raise UsageError("the expression has no variable to plot against", hint="e.g. gradcli plot 'sin(x)'")
    axis, default = _choose_axis(names, list(var), plan)
    leaves = make_leaves(names, list(var), dtype="float64", seed=seed, default=default)
    x = leaves.tensors[axis].detach().reshape(-1).to(torch_dtype).to(torch.float64)
    x = x.sort().values
    size = x.numel()
    if size and not math.isfinite(float(x[-1] - x[0])):  # the axis, its ticks and shades measure it
        raise UsageError(
            f"the x axis from {float(x[0]):g} to {float(x[-1]):g} is wider than a float64 can hold",
            hint="plot a range whose width is below 1.7e308",
        )
    if size > MAX_PLOT_POINTS:
        raise LimitError(f"{size:,} points on the x axis; plot draws at most {MAX_PLOT_POINTS:,}")
    fixed = {n: float(t.detach().to(torch_dtype).double().item()) for n, t in leaves.tensors.items() if n != axis}
    points = {n: (x if n == axis else torch.full((size,), fixed[n], dtype=torch.float64)) for n in names}
    spec = leaves.specs[axis].text
    source = f"{axis}={spec} ({'default' if axis in leaves.defaulted else '--var'})"
    data = PlotData(expression, axis, x.numpy(), _function(plan, library, points, torch_dtype, size),
                    [], [], [], fixed, dtype, source)
    _fill(data, program, plan, library, points, order, torch_dtype)
    return data


def _choose_axis(names: list[str], options: list[str], plan: Plan) -> tuple[str, Callable[[str, int], str]]:
    """The variable that varies along x, and the default spec of variables without --var."""
    given = {}
    for option in options:
        spec = parse_var(option)  # make_leaves reports unknown or repeated names
        given[spec.name] = spec
    varying = [n for n in names if n in given and given[n].numel > 1]
    if len(varying) > 1:
        raise UsageError(
            f"plot draws a curve over one variable, but {varying[0]} and {varying[1]} both have several values",
            hint=f"give the others one value each, e.g. --var {varying[1]}=0.5",
        )
    if varying:
        axis = varying[0]
    else:
        missing = [n for n in names if n not in given]
        if not missing:
            raise UsageError(
                "every variable has one value: there is no range to plot over",
                hint=f"give one a range, e.g. --var '{names[0]}=linspace(-3, 3, 601)'",
            )
        axis = missing[0]
    entry = plan.entry
    axis_default = f"linspace({entry.domain[0]!r}, {entry.domain[1]!r}, 1001)" if entry is not None else DEFAULT_AXIS
    return axis, lambda name, index: axis_default if name == axis else default_spec(index)


def _function(plan: Plan, library: Any, points: dict[str, torch.Tensor], dtype: Any, size: int) -> np.ndarray:
    """f at every point, in the plot's dtype (for a final sum/mean: its elementwise body)."""
    from ..interpret.to_torch import build

    with torch.no_grad():
        out = build(plan.body, {n: v.to(dtype) for n, v in points.items()}, library=library).output
    return torch.as_tensor(out, dtype=torch.float64).expand(size).numpy().copy()


def _fill(data: PlotData, program: Any, plan: Plan, library: Any, points: dict[str, torch.Tensor],
          order: int, dtype: Any) -> None:
    axis = data.variable
    ev = evaluate(program, plan, library, points, order=order, dtype=data.dtype)
    if ev.autograd_error is not None:
        raise UsageError(f"autograd raised: {ev.autograd_error}", hint="`gradcli trace ... --flow` shows where")
    keys: list[Any] = [axis] + ([(axis, axis)] if order == 2 else [])
    if ev.targets is None or ev.formulas is None or ev.outside is None:
        data.notes.append(f"the symbolic derivative was skipped: {ev.symbolic_skipped}")
        for k, key in enumerate(keys, start=1):
            got = ev.autograd[key].detach().to(torch.float64).numpy()
            data.curves.append(Curve(k, None, got, None, None, None, None))
            data.shades += shades(data.x, ~np.isfinite(got), "nonfinite", k)
        data.shades += shades(data.x, ~np.isfinite(data.f), "nonfinite", 0)
        return
    import sympy

    outside = ev.outside.numpy()
    data.shades += shades(data.x, outside, "undefined", 0)
    data.shades += shades(data.x, ~np.isfinite(data.f) & ~outside, "nonfinite", 0)
    rtol, atol = TOLERANCES[data.dtype]
    largest = float(torch.finfo(dtype).max)
    for k, key in enumerate(keys, start=1):
        formula = ev.formulas.first[axis] if k == 1 else ev.formulas.second[key]
        target = ev.targets[key]
        curve = _curve(k, sympy.sstr(formula), ev.autograd[key], target, ev.comparisons[key], atol, rtol)
        data.curves.append(curve)
        undefined = (target.undefined & ~ev.outside).numpy()
        data.shades += shades(data.x, undefined, "undefined", k)
        data.shades += _wrong(data.x, curve, target, atol, rtol, largest, k)
        kinks = data.x[(target.kink & ~target.undefined).numpy()]
        data.kinks = sorted(set(data.kinks) | {float(v) for v in kinks[:MAX_KINK_LINES]})
    from ..verify.causes.at_points import find_causes

    data.causes = find_causes(plan.body, library, points, ev.autograd, ev.targets, dtype=dtype, rtol=rtol, atol=atol,
                              source=program.source, outside=ev.outside)


def _curve(order: int, formula: str, got: torch.Tensor, target: Target, comparison: Comparison, atol: float,
           rtol: float) -> Curve:
    """The exact curve: float64 values, replaced by 50-digit ones wherever they are in doubt
    (the target remembers those the comparison already computed)."""
    got64 = got.detach().to(torch.float64).reshape(-1).cpu()
    truth = target.reference.clone()
    valid = ~target.undefined & ~target.kink
    tol = atol + rtol * truth.abs()
    close = valid & torch.isfinite(truth) & torch.isfinite(got64) & ((got64 - truth).abs() <= tol)
    doubtful = (valid & ~close).nonzero().flatten().tolist()
    chosen = sample(doubtful)
    for index, value in zip(chosen, target.exact(chosen)):
        truth[index] = float("nan") if value is UNDEFINED else value
    truth[target.undefined] = float("nan")
    difference = (got64 - truth).abs()
    tolerance = atol + rtol * truth.abs()
    return Curve(order, formula, got64.numpy(), truth.numpy(), difference.numpy(), tolerance.numpy(), comparison)


def _wrong(x: np.ndarray, curve: Curve, target: Target, atol: float, rtol: float, largest: float,
           order: int) -> list[Shade]:
    """Shaded ranges where autograd is wrong, and where the exact value is beyond the float range."""
    assert curve.exact is not None and curve.difference is not None and curve.tolerance is not None
    known = np.isfinite(curve.exact) & ~target.undefined.numpy() & ~target.kink.numpy()
    overflow = known & (np.abs(curve.exact) > largest)
    got_inf = np.isinf(curve.autograd) & np.isinf(curve.exact) & (curve.autograd == curve.exact)
    overflow |= got_inf & ~target.undefined.numpy()
    bad = known & ~overflow & ~(curve.difference <= curve.tolerance)
    found = shades(x, overflow, "overflow", order)
    for shade in shades(x, bad, "unstable", order):
        run = (x >= shade.first) & (x <= shade.last) & bad
        found.append(dataclasses.replace(
            shade, got=describe_values(curve.autograd[run]), exact=describe_values(curve.exact[run])))
    return found
