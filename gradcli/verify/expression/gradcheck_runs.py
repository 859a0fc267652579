"""Which finite-difference checks `gradcli check` runs, on which points or elements.

torch.autograd.gradcheck (and gradgradcheck at order 2) in float64, on the points the
exact comparison kept (a spaced sample of them), or on small tensors with the elements at a
kink or where the derivative is undefined held fixed (coordinates.py): finite differences
straddling a kink measure neither side. When they cannot run, the verdict says why.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ...exact.compare import Target
from ...exact.coordinates import at_kink, held_fixed
from ..finite_differences.gradchecks import GradcheckVerdict, run_gradcheck, spaced
from .context import CheckContext
from ..finite_differences.settle import settle_elementwise

KINK_REASON = "the values are at or next to a branch boundary or a kink, where finite differences mislead"


def gradchecks_elementwise(
    check: CheckContext, rounded: dict[str, torch.Tensor], keep: torch.Tensor,
    exact: tuple[dict[Any, Target], int] | None = None,
) -> None:
    """gradcheck on the kept points; with `exact` (targets, size) a failure is settled with
    the exact derivative (finite_differences/settle.py)."""
    names = check.names
    index = keep.nonzero().flatten()
    index = index[spaced(index.numel())]
    inputs = [rounded[n][index] for n in names]
    reason = "no point is left for finite differences" if not index.numel() else None
    gradchecks(check, inputs, reason)
    if exact is not None and index.numel():
        targets, size = exact

        def rerun(kept: torch.Tensor, second: bool) -> GradcheckVerdict:
            return run_gradcheck(check.torch_fn(), [x[kept] for x in inputs], seed=check.result.seed, second=second)

        settle_elementwise(check, {n: x for n, x in zip(names, inputs)}, index, targets, size, rerun)


def gradchecks(
    check: CheckContext, inputs: list[torch.Tensor], reason: str | None, held: list[torch.Tensor] | None = None,
) -> None:
    """gradcheck (and gradgradcheck) unless `reason` says why not; elements marked in `held`
    keep their values (coordinates.py)."""
    result, names = check.result, check.names
    fn = check.torch_fn()
    if held is not None:
        fn, inputs = held_fixed(fn, inputs, held)
    if reason is None and not names:
        reason = "the expression has no variables"
    if reason is None:
        probe = fn(*(x.detach().double().requires_grad_(True) for x in inputs))
        if not isinstance(probe, torch.Tensor) or not probe.requires_grad:
            reason = "the expression does not depend on its variables"
        elif not bool(torch.isfinite(probe.detach()).all()):
            reason = "the function is not finite at the points left"
    if reason is not None:
        result.gradcheck = GradcheckVerdict(None, message=reason)
        if result.order == 2:
            result.gradgradcheck = GradcheckVerdict(None, message=reason)
        return
    result.gradcheck = run_gradcheck(fn, inputs, seed=result.seed)
    if result.order == 2:
        result.gradgradcheck = run_gradcheck(fn, inputs, seed=result.seed, second=True)


def coupled_gradchecks(
    check: CheckContext, values: Mapping[str, torch.Tensor], near: bool, undefined: Mapping[str, torch.Tensor] | None = None,
) -> bool:
    """gradcheck of a program whose operations couple elements. When some element is `near`
    a kink, the elements whose own move changes a branch are found one by one and held
    fixed (coordinates.py); so are the `undefined` ones (no derivative to measure); the
    others are still checked. True when every element was."""
    result, program, library, names = check.result, check.program, check.library, check.names
    inputs = [values[n] for n in names]
    if not near and undefined is None:
        gradchecks(check, inputs, None)
        return True
    held = at_kink(program, library, {n: values[n] for n in names}) if near else {
        n: torch.zeros(values[n].shape, dtype=torch.bool) for n in names}
    if held is None:
        gradchecks(check, inputs, KINK_REASON)
        return False
    total = sum(h.numel() for h in held.values())
    kinks = sum(int(h.sum()) for h in held.values())
    if undefined is not None:
        held = {n: held[n] | undefined[n] if n in undefined else held[n] for n in names}
    count = sum(int(h.sum()) for h in held.values())
    if count == total:
        gradchecks(check, inputs, KINK_REASON)
        return False
    if kinks:
        result.notes.append(
            f"{kinks:,} of {total:,} elements are at or next to a kink (moving one alone changes a branch): "
            "held fixed in gradcheck, the other elements checked"
        )
    if count > kinks:
        result.notes.append(
            f"{count - kinks:,} of {total:,} elements are where the exact derivative is undefined: "
            "held fixed in gradcheck, the other elements checked"
        )
    gradchecks(check, inputs, None, [held[n] for n in names] if count else None)
    return not count
