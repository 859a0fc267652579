"""`gradcli check`'s exact mode: operations that couple elements, compared on small tensors.

softmax, matmul and reductions over a dim mix the elements, so no point stands alone: the
gradient of sum(w*y) with distinct weights w is compared element by element with sympy's,
one symbol per element, up to plan.EXACT_MAX_ELEMENTS elements (beyond, gradcheck alone
runs). Elements at a kink or where the exact derivative is undefined are held fixed in
gradcheck (verify/expression/gradcheck_runs.py); the causes are named per element (verify/causes/elements.py).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from ...interpret.variables import resolve_dtype
from ...errors import DomainError
from ...exact.boundaries import any_near_boundary
from .gradcheck_runs import coupled_gradchecks
from ...exact.compare import Target, compare
from ...exact.domain import defined_at
from ...exact.evaluation import symbolic_side
from ...exact.coupled import exact_autograd, exact_formulas, exact_targets
from ...exact.plan import EXACT_MAX_ELEMENTS
from .context import CheckContext
from .result import CheckResult
from ..finite_differences.settle import settle_exact

#: Most second derivatives (elements squared) compared exactly at order 2 in exact mode.
EXACT_SECOND_MAX_ENTRIES = 256


def check_exact(check: CheckContext, values: dict[str, torch.Tensor]) -> None:
    """Compare autograd with the exact derivative element by element on `values`, then gradcheck."""
    result, program, plan, library, device = check.result, check.program, check.plan, check.library, check.device
    names = check.names
    total = sum(t.numel() for t in values.values())
    coupling = ", ".join(plan.coupling) + (" couples" if len(plan.coupling) == 1 else " couple")
    if total > EXACT_MAX_ELEMENTS:
        result.mode = "skipped"
        result.symbolic_skipped = (
            f"{coupling} the elements, so the derivative is compared exactly with one symbol per "
            f"element, which is done up to {EXACT_MAX_ELEMENTS} elements; the variables have {total:,} "
            "(give smaller --var values for the exact comparison); gradcheck still runs"
        )
        coupled_gradchecks(check, values, any_near_boundary(program, library, values))
        return
    torch_dtype = resolve_dtype(result.dtype)
    rounded = {n: v.detach().to(torch_dtype).to(torch.float64).clone() for n, v in values.items()}
    leaves = {n: v.detach().to(torch_dtype).to(device).clone().requires_grad_(True) for n, v in values.items()}
    try:
        auto = {k: v.cpu() for k, v in exact_autograd(program, library, leaves, result.order).items()}
    except RuntimeError as err:
        result.autograd_error = str(err).strip().splitlines()[0]
        return
    result.points = rounded
    result.autograd_nonfinite = sum(int((~torch.isfinite(v)).sum()) for v in auto.values())
    symbolic_order = result.order
    if result.order == 2 and total * total > EXACT_SECOND_MAX_ENTRIES:
        # sympy's second derivatives grow as elements squared, each a large formula to derive and
        # evaluate at 50 digits: a 32-element softmax took 75 s at order 2 (6 s at order 1).
        symbolic_order = 1
        result.notes.append(
            f"the {total} elements have {total * total:,} second derivatives, more than the "
            f"{EXACT_SECOND_MAX_ENTRIES} compared exactly: gradgradcheck checks them numerically "
            f"(give {math.isqrt(EXACT_SECOND_MAX_ENTRIES)} elements or fewer for the exact comparison)"
        )
    shapes = {n: tuple(v.shape) for n, v in values.items()}
    targets, skipped = symbolic_side(
        lambda: exact_targets(exact_formulas(program, library, shapes, symbolic_order), rounded,
                              lambda: defined_at(program, library, rounded)))
    if targets is None:
        result.symbolic_skipped = f"{skipped}; gradcheck still runs"
    else:
        result.notes.append(
            f"{coupling} the elements: the gradient of sum(w*y) with distinct weights w is compared, "
            "element by element, with sympy's (one symbol per element)"
        )
        if names and all(bool(targets[n].undefined.all()) for n in names):
            raise DomainError("the derivative is undefined at the given values (outside the domain of the function or "
                              "of its derivative)",
                              hint="give values inside the domain with --var")
        _compare_all(result, auto, targets, names, torch_dtype)
        near = any(t.near is not None and bool(t.near.any()) for t in targets.values())
    if result.symbolic_skipped:
        near = any_near_boundary(program, library, rounded)
    undefined = _undefined_elements(targets, rounded) if targets is not None else None
    if coupled_gradchecks(check, rounded, near, undefined) and not result.symbolic_skipped:
        settle_exact(check, rounded, targets)
    if targets is not None:
        result.causes = _element_causes(check, rounded, auto, targets)


def _undefined_elements(targets: dict[Any, Target], values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """Per variable, the elements where its exact derivative is undefined (the norm of a zero
    row): finite differences there measure nothing, so gradcheck holds them fixed."""
    found = {n: targets[n].undefined.reshape(values[n].shape) for n in values if n in targets}
    return found if any(bool(m.any()) for m in found.values()) else None


def _element_causes(check: CheckContext, values: dict[str, torch.Tensor], auto: dict[Any, torch.Tensor],
                    targets: dict[Any, Target]) -> list[Any]:
    """Why autograd is wrong or not finite at some elements (causes/elements.py)."""
    from ..causes.elements import find_element_causes

    return find_element_causes(check.program, check.library, values, auto, targets, dtype=check.dtype,
                               source=check.program.source, **check.result.tolerance())


def _compare_all(
    result: CheckResult, auto: dict[Any, torch.Tensor], targets: dict[Any, Target], names: list[str], dtype: Any
) -> None:
    for key, target in targets.items():
        comparison = compare(auto[key], target, candidate_name="autograd", largest=float(torch.finfo(dtype).max),
                             seed=result.seed or 0, **result.tolerance())
        (result.variables if isinstance(key, str) else result.second).append(comparison)
