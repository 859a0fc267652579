"""Jacobian entries of check-function at a kink: set apart, counted, not compared.

At a point where the function has no derivative (hard-swish at ±3, relu at 0) a backward
may rightly return either one-sided derivative (torch's own hardswish does), while the
central difference straddles the kink and gives their mean: comparing them is a false alarm.
`check` reports such points apart; check-function does the same, from the best evidence
there is:

- with --ref, the reference expression's kinks, found as `check` finds them (regions.py:
  a branch of where/clamp/relu changes, abs at 0, a tie of maximum), entry by entry, only
  along the element the entry differentiates in (a kink of x[4] is none of d/dx[0]);
- without it, one-sided differences of the Function itself: an entry is at a kink when its
  left and right difference quotients disagree beyond gradcheck's tolerance, the gap does
  not shrink with the step (a smooth function's gap is the step times its curvature, a
  kink's is the jump), and your backward equals one of them or lies between them. A
  backward wrong at a kink (outside both sides) or anywhere else still fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..finite_differences.jacobian import ATOL, RTOL, disagree, element_label, flat_output
from ..finite_differences.precision import grid, spacing

#: The steps of the one-sided differences: their gap at a kink stays, a curvature's shrinks.
STEP, COARSE_STEP = 1e-6, 1e-5
#: The gap at STEP must keep at least this share of the gap at COARSE_STEP to be a kink.
KEEPS = 0.5

Fn = Callable[[dict[str, torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class OutsideKink:
    """An entry at a kink where backward gave a value outside both one-sided derivatives."""

    element: str  # "x[11]"
    output: str  # "out[11]"
    at: float  # the input element's value
    left: float
    right: float
    got: float


def one_sided_kinks(
    fn: Fn, tensors: dict[str, torch.Tensor], got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
    outside: list[OutsideKink] | None = None,
) -> dict[str, torch.Tensor]:
    """Per input, a mask over its Jacobian block: the disagreeing entries where one-sided
    differences of `fn` show a kink and `got` equals one side or lies between them. Entries
    at a kink with `got` outside both sides stay wrong, and are added to `outside`."""
    masks = {}
    for name, g in got.items():
        mask = torch.zeros_like(g, dtype=torch.bool)
        bad = disagree(g, expected[name])
        for j in bad.any(dim=0).nonzero().flatten().tolist():
            rows = bad[:, j].nonzero().flatten()
            left, right, coarse_gap, noise = _quotients(fn, tensors, name, j)
            lo, hi = torch.minimum(left, right)[rows], torch.maximum(left, right)[rows]
            gap = (right - left).abs()[rows]
            tol = ATOL + RTOL * torch.maximum(left.abs(), right.abs())[rows]
            value = g[rows, j]
            at_kink = (gap > tol) & (gap > noise[rows]) & (gap >= KEEPS * coarse_gap[rows])
            between = (value >= lo - tol) & (value <= hi + tol)
            mask[rows[at_kink & between], j] = True
            if outside is not None:
                element = element_label(name, tensors[name].shape, j)
                at = tensors[name].reshape(-1)[j].item()
                outside += [OutsideKink(element, element_label("out", None, i), at, left[i].item(), right[i].item(),
                                        g[i, j].item()) for i in rows[at_kink & ~between].tolist()]
        masks[name] = mask
    return masks


def _quotients(fn: Fn, tensors: dict[str, torch.Tensor], name: str, j: int) -> tuple[torch.Tensor, ...]:
    """Left and right difference quotients of every output in element j of `name` (at
    STEP), the gap between them at COARSE_STEP, and the gap rounding alone can make."""
    base = {n: t.detach().clone() for n, t in tensors.items()}
    flat = base[name].view(-1)
    keep = flat[j].item()

    def at(x: float) -> torch.Tensor:
        flat[j] = x
        value = flat_output(fn, base).to(torch.float64)
        flat[j] = keep
        return value

    with torch.no_grad():
        centre = at(keep)
        moved = {h: (at(keep - h), at(keep + h)) for h in (STEP, COARSE_STEP)}
    sides = {h: ((centre - below) / h, (above - centre) / h) for h, (below, above) in moved.items()}
    left, right = sides[STEP]
    coarse_left, coarse_right = sides[COARSE_STEP]
    # A forward that rounds to float32 inside moves by its rounding, not its slope, over
    # STEP: two roundings per quotient, both sides, are noise and no kink (precision.py).
    dtype = grid(centre, *moved[STEP])
    largest = torch.stack([centre.abs(), *(v.abs() for v in moved[STEP])]).amax(dim=0)
    noise = 4 * spacing(largest, dtype) / STEP if dtype != torch.float64 else torch.zeros_like(centre)
    return left, right, (coarse_right - coarse_left).abs(), noise


def reference_kinks(
    program: Any, library: Any, tensors: dict[str, torch.Tensor], numbers: dict[str, float],
    weights: torch.Tensor | None, order: int,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Per input, masks over the first-order Jacobian block (out x element) and, at order 2,
    over the block of the gradient of sum(weights * out) (gradient x element): the entries at
    or next to a kink of the reference (regions.py's `kink | near`), judged along the one
    element each entry differentiates in. Runs sympy: call it within a budget."""
    import sympy

    from .reference import symbolic_outputs, weighted_gradient
    from ...exact.regions import regions

    out, symbols, env = symbolic_outputs(program, library, tensors, numbers)

    # Only these make kinks (regions.py); a function without them has none, nor its derivatives.
    branching = (sympy.Piecewise, sympy.Abs, sympy.sign, sympy.Heaviside, sympy.Max, sympy.Min)
    if not any(y.has(*branching) for y in out):
        return ({name: torch.zeros(len(out), len(syms), dtype=torch.bool) for name, syms in symbols.items()},
                {name: torch.zeros(len(env), len(syms), dtype=torch.bool) for name, syms in symbols.items()}
                if order == 2 else {})

    def masks(rows: Sequence[Any]) -> dict[str, torch.Tensor]:
        found = {}
        for name, syms in symbols.items():
            mask = torch.zeros(len(rows), len(syms), dtype=torch.bool)
            for i, row in enumerate(rows):
                for j, s in enumerate(syms):
                    if s not in row.free_symbols or not row.has(*branching):
                        continue
                    _, kink, near = regions(None, [row, sympy.diff(row, s)], env, 1, {s})
                    mask[i, j] = bool(kink.any() or near.any())
            found[name] = mask
        return found

    first = masks(out)
    if order < 2:
        return first, {}
    return first, masks(weighted_gradient(out, symbols, weights))


def reference_kink_masks(
    ref: str, inputs: Any, library_dirs: Sequence[Any], weights: torch.Tensor | None, order: int, outputs: int,
) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor], list[str]]:
    """`reference_kinks` of the expression `ref` at `inputs`, within the symbolic budget:
    (first, second, notes), first None when they were not looked for (the caller then falls
    back on one-sided differences). A reference that cannot be used is left to reference.py,
    which says why; past REF_MAX_ENTRIES Jacobian entries (`outputs` x input elements), as
    there, sympy is not asked."""
    from ...errors import GradcliError
    from ...pipeline import load
    from .reference import REF_MAX_ENTRIES
    from ...exact.symbolic import SYMBOLIC_BUDGET, SymbolicTimeout, Unsupported, within

    tensors = {n: t.detach().to(torch.float64) for n, t in inputs.tensors().items()}
    numbers = {n: float(v) for n, v in inputs.numbers().items() if isinstance(v, (int, float))}
    if outputs * sum(t.numel() for t in tensors.values()) > REF_MAX_ENTRIES:
        return None, {}, []
    try:
        program, library = load(ref, library_dirs)
        if any(v not in tensors and v not in numbers for v in program.variables):
            return None, {}, []
        first, second = within(SYMBOLIC_BUDGET, reference_kinks, program, library, tensors, numbers, weights, order)
        if any(mask.shape[0] != outputs for mask in first.values()):
            return None, {}, []  # the reference has another number of outputs: reference.py says so
    except GradcliError:
        return None, {}, []
    except (SymbolicTimeout, Unsupported) as err:
        return None, {}, [f"the reference's kinks were not looked for ({err}): one-sided differences decide instead"]
    return first, second, []


#: The reason gradcheck's failure is set aside when it comes from kinks alone.
AT_KINK = "the central difference straddles a kink, where the function has one derivative per side"


def settle_at_kinks(verdict: Any, checks: Sequence[Any]) -> Any:
    """gradcheck compares the same Jacobian, kinks included: when it failed but the
    entry-by-entry comparison finds nothing wrong except entries at a kink, its failure is
    those entries', counted as unreliable (as settle.py counts finite differences' faults)."""
    from ..finite_differences.gradchecks import GradcheckVerdict

    kinks = sum(c.kinks for c in checks)
    # Only a Jacobian mismatch is explained so: gradcheck's other findings (not reentrant,
    # undefined output gradients, autograd raising) are not in the comparison.
    mismatch = (verdict.message or "").startswith("Jacobian mismatch")
    if verdict.ok is not False or not mismatch or not kinks or not checks or not all(c.ok for c in checks):
        return verdict
    message = f"it failed only at {kinks:,} Jacobian entr{'ies' if kinks != 1 else 'y'} at a kink, reported apart"
    return GradcheckVerdict(True, verdict.fast_mode, message, verdict.points, kinks, {AT_KINK: kinks})
