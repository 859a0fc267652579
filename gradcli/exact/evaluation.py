"""autograd and the exact derivative on the same points: what `check` judges and `plot` draws.

The elementwise pipeline's shared half, written once: autograd's derivatives per element at
the chosen dtype; sympy's derivatives of the same AST, evaluated in float64 on the rounded
points (`elementwise`), with the domain and kink masks; and the comparison of the two, which
arbitrates doubtful points at 50 digits (`compare`). `check` adds gradcheck and the verdict;
`plot` adds the per-point exact curve and shaded ranges. When sympy cannot give the
derivative (too slow, an unsupported form, a shape it cannot translate) the symbolic side is
skipped with the reason, in one place for every caller.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, TypeVar

import torch

from ..errors import ShapeError, UsageError
from ..language.library import Library
from . import elementwise as ew
from .compare import Comparison, Target, compare
from .plan import Plan
from .symbolic import SymbolicTimeout, Unsupported

#: (rtol, atol) per dtype: autograd at that precision against the exact value.
TOLERANCES = {
    "float64": (1e-7, 1e-10),
    "float32": (1e-4, 1e-6),
    "float16": (5e-3, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}

Order = Literal[1, 2]
T = TypeVar("T")


def check_order(order: int) -> None:
    """Derivatives of order 1 and 2 are checked; anything else is a usage error."""
    if order not in (1, 2):
        raise UsageError(f"--order must be 1 or 2, not {order}")


def symbolic_side(compute: Callable[[], T]) -> tuple[T | None, str | None]:
    """`compute()` (sympy's part), or None and why it was skipped (gradcli never fails on it)."""
    try:
        return compute(), None
    except (SymbolicTimeout, Unsupported) as err:
        return None, str(err)
    except ShapeError as err:  # torch took the program, so this is a limit of the translation
        return None, f"sympy could not translate it ({err.message})"


@dataclass
class Evaluation:
    """Both derivatives on the points, keyed by variable ("x") or pair (("x", "y"))."""

    autograd: dict[Any, torch.Tensor]  # on the cpu; empty when autograd raised
    autograd_error: str | None = None  # the first line of torch's error
    formulas: ew.Formulas | None = None  # None: the symbolic side was skipped
    targets: dict[Any, Target] | None = None  # the exact values, masks and 50-digit oracle
    outside: torch.Tensor | None = None  # where the function itself is outside its domain
    near_kink: torch.Tensor | None = None  # too close to a kink for finite differences
    comparisons: dict[Any, Comparison] = dataclasses.field(default_factory=dict)
    symbolic_skipped: str | None = None
    #: The points as the dtype holds them, in float64: where both sides were evaluated (one
    #: copy, shared with the caller: on 10^7 points each copy is 80 MB of the peak).
    points: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)


def evaluate(
    program: Any, plan: Plan, library: Library, points: Mapping[str, torch.Tensor], *, order: int, dtype: str,
    device: str = "cpu", rtol: float | None = None, atol: float | None = None, seed: int = 0,
) -> Evaluation:
    """autograd at `dtype` and the exact derivatives at the same (rounded) `points`, compared.

    `points` are flat float64 tensors of one size, one per variable of an elementwise plan.
    Tolerances default to TOLERANCES[dtype]; `seed` picks the agreeing points whose exact
    value is sampled at 50 digits (compare.py).
    """
    from ..interpret.variables import resolve_dtype

    check_order(order)
    torch_dtype = resolve_dtype(dtype)
    size = next(iter(points.values())).numel() if points else 1
    rounded = {n: _rounded(v, torch_dtype) for n, v in points.items()}
    # The leaves share the points' memory where no conversion copies them (a float64 check on
    # the cpu): the program reads its leaves and never writes them (10^7 points: 80 MB less).
    leaves = {n: v.detach().to(torch_dtype).to(device).requires_grad_(True) for n, v in points.items()}
    try:
        auto, _ = ew.autograd(program, library, leaves, order)
    except RuntimeError as err:
        return Evaluation({}, autograd_error=str(err).strip().splitlines()[0])
    ev = Evaluation({k: v.cpu() for k, v in auto.items()}, points=rounded)
    del leaves
    ev.formulas, ev.symbolic_skipped = symbolic_side(lambda: ew.formulas(plan, library, order, size))
    if ev.formulas is None:
        return ev
    found, ev.symbolic_skipped = symbolic_side(lambda: ew.targets(ev.formulas, rounded, size))
    if found is None:
        ev.formulas = None
        return ev
    targets, ev.outside, ev.near_kink = found
    ev.targets = {key: _remembering(t) for key, t in targets.items()}
    default_rtol, default_atol = TOLERANCES[dtype]
    tol = {"rtol": default_rtol if rtol is None else rtol, "atol": default_atol if atol is None else atol}
    largest = float(torch.finfo(torch_dtype).max)
    ev.comparisons = {
        key: compare(ev.autograd[key], target, candidate_name="autograd", largest=largest, seed=seed, **tol)
        for key, target in ev.targets.items()
    }
    return ev


def _rounded(points: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`points` rounded to `dtype`, in float64: in a float64 check the points themselves (the
    callers, check and plot, made them and change nothing in place), else the round trip's copy."""
    return points.detach().to(dtype).to(torch.float64)


def _remembering(target: Target) -> Target:
    """`target` whose 50-digit values are computed once per point: the comparison arbitrates
    doubtful points and a plot's exact curve reuses those values instead of paying mpmath twice."""
    remembered: dict[int, Any] = {}
    exact_values = target.exact

    def exact(indices: list[int]) -> list[Any]:
        missing = [i for i in indices if i not in remembered]
        if missing:
            remembered.update(zip(missing, exact_values(missing)))
        return [remembered[i] for i in indices]

    return dataclasses.replace(target, exact=exact)
