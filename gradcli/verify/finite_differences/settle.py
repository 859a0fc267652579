"""Settling a failed gradcheck with the exact derivative (`verify/finite_differences/arbiter.py` decides per element).

`check` runs gradcheck (and gradgradcheck) on its points; when one fails and sympy's exact
derivative is known there, the failure is looked at element by element:
- elementwise and reduced checks: central differences of the elementwise body at every
  point at once (second order: of autograd's first derivative); where every disagreement
  is finite differences' fault, gradcheck runs again without those points, and its verdict
  stands, the left-out points counted and explained;
- exact checks of coupled operations: central differences of L = sum(w*y) per element;
  an element cannot be left out of a coupled function, so where every disagreement is
  explained the verdict becomes a pass, saying so.
Anything not explained (autograd disagrees with the exact value, or no exact value) leaves
the failure as torch reported it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ...interpret.to_torch import build
from ...exact import elementwise as ew
from ...exact.coupled import exact_autograd, weights
from .arbiter import (
    Arbitration, arbitrate, elementwise_differences, elementwise_differences_each, projected_differences,
    unreliable_sentence,
)
from .gradchecks import GradcheckVerdict


def settle_elementwise(
    check: Any, points: dict[str, torch.Tensor], index: torch.Tensor, targets: dict[Any, Any], size: int,
    rerun: Callable[[torch.Tensor, bool], GradcheckVerdict],
) -> None:
    """`check`: the check's context (verify/expression/context.py: result, plan, library,
    names); `points`: float64 values of every variable at the P gradchecked points, which are
    `index` in the targets' numbering; `rerun(kept, second)` runs the check on a subset."""
    result, plan, library, names = check.result, check.plan, check.library, check.names
    scale = 1.0 / size if plan.reduction == "mean" else 1.0

    def first(values: dict[str, torch.Tensor]) -> dict[Any, torch.Tensor]:
        leaves = {n: v.detach().clone().requires_grad_(True) for n, v in values.items()}
        return ew.autograd(plan.body, library, leaves, 1)[0]

    def body(values: dict[str, torch.Tensor]) -> Any:
        with torch.no_grad():
            return build(plan.body, values, library=library).output

    for label, second in (("gradcheck", False), ("gradgradcheck", True)):
        verdict = getattr(result, label)
        if verdict is None or verdict.ok is not False:
            continue
        outcomes: list[Arbitration] = []
        if not second:
            auto = first(points)
            for name in names:
                diffs = elementwise_differences(body, points, name, scale)
                outcomes.append(_arbitrate(diffs, auto[name] * scale, targets[name], index, result))
        else:
            # Every second derivative at once (one double backward per pair), not once per pair:
            # 25 variables are 325 pairs, and asking for all of them per pair was 105,625 grads.
            # gradgradcheck differentiates every first derivative in every variable, so both of a
            # mirror pair are taken: d(df/dy)/dx can be the one that fails (x*y at x = 1e20, y = 1:
            # the step in x is lost to rounding) while d(df/dx)/dy is fine.
            # The first derivatives are differenced in each variable from two backward passes (25
            # variables: 50 passes, not 1,250).
            autograd2 = _seconds(plan, library, points)
            moved = {q: elementwise_differences_each(first, points, q, scale) for q in names}
            for i, a in enumerate(names):
                for b in names[i:]:
                    for p, q in ((a, b), (b, a)) if a != b else ((a, b),):
                        outcomes.append(_arbitrate(moved[q][p], autograd2[(p, q)] * scale, targets[(a, b)], index, result))
        _conclude(result, label, verdict, outcomes, lambda kept, second=second: rerun(kept, second), index.numel())


def _seconds(plan: Any, library: Any, points: dict[str, torch.Tensor]) -> dict[Any, torch.Tensor]:
    """autograd's second derivatives keyed (a, b) for d(df/da)/db, both of every mirror pair:
    ew.autograd keys a pair once, in the order of its leaves, so a second call in the reverse
    order gives the mirrors."""
    found: dict[Any, torch.Tensor] = {}
    for order in (list(points), list(reversed(points))):
        leaves = {n: points[n].detach().clone().requires_grad_(True) for n in order}
        found.update(ew.autograd(plan.body, library, leaves, 2)[0])
    return found


def _arbitrate(diffs: Any, auto: torch.Tensor, target: Any, index: torch.Tensor, result: Any) -> Arbitration:
    tol = result.tolerances
    return arbitrate(diffs, auto, lambda positions: target.exact(index[positions].tolist()),
                     atol=tol["atol"], rtol=tol["rtol"])


def settle_exact(check: Any, values: dict[str, torch.Tensor], targets: dict[Any, Any]) -> None:
    """The exact (coupled) mode, first order only (gradgradcheck's failures stand); `check`
    as in settle_elementwise."""
    result, program, library, names = check.result, check.program, check.library, check.names
    verdict = result.gradcheck
    if verdict is None or verdict.ok is not False:
        return
    leaves = {n: v.detach().to(torch.float64).clone().requires_grad_(True) for n, v in values.items()}
    auto = exact_autograd(program, library, leaves, 1)

    def fn(vals: dict[str, torch.Tensor]) -> Any:
        return build(program, vals, library=library).output

    with torch.no_grad():
        out = torch.as_tensor(fn({n: v.detach().to(torch.float64) for n, v in values.items()}))
    w = torch.tensor([float(v) for v in weights(out.numel())], dtype=torch.float64)
    outcomes = []
    for name in names:
        diffs = projected_differences(fn, {n: v.detach().to(torch.float64) for n, v in values.items()}, name, w)
        target = targets[name]
        tol = result.tolerances
        outcomes.append(arbitrate(diffs, auto[name], target.exact, atol=tol["atol"], rtol=tol["rtol"]))
    _conclude(result, "gradcheck", verdict, outcomes, None, 0)


def _projection_alone(result: Any, label: str, verdict: GradcheckVerdict, outcomes: list[Arbitration]) -> bool:
    """Whether a fast-mode failure is its one projection's alone: element-by-element central
    differences (`outcomes`) found no disagreement, and every exact comparison of the
    derivatives gradcheck checks (first; at order 2 first and second, as gradgradcheck also
    differentiates in the output gradient) compared points and found none wrong. The same
    evidence that settles a slow-mode failure (the arbiter of order 1) then settles order 2."""
    if not verdict.fast_mode or not (verdict.message or "").startswith("Jacobian mismatch") or not outcomes:
        return False
    comparisons = [*result.variables, *(result.second if label == "gradgradcheck" else [])]
    if label == "gradgradcheck" and not result.second:
        return False
    return bool(comparisons) and all(c.ok and c.points > 0 and not c.not_arbitrated for c in comparisons)


def _conclude(
    result: Any, label: str, verdict: GradcheckVerdict, outcomes: list[Arbitration],
    rerun: Callable[[torch.Tensor], GradcheckVerdict] | None, count: int,
) -> None:
    what = " of the first derivative" if label == "gradgradcheck" else ""
    wrong = sum(len(o.wrong_at) for o in outcomes)
    if wrong:
        result.notes.append(
            f"{label}: finite differences and the 50-digit derivative both disagree with autograd at "
            f"{wrong:,} point{'s' if wrong != 1 else ''}"
        )
        return
    if not any(o.disagreeing for o in outcomes):
        if rerun is not None and _projection_alone(result, label, verdict, outcomes):
            sentence = _projection_sentence(verdict, what, count)
            setattr(result, label, GradcheckVerdict(True, verdict.fast_mode, sentence, verdict.points))
            result.notes.append(f"{label}: {sentence}")
        return  # otherwise nothing was found element by element: torch's verdict stands
    if not all(o.explained for o in outcomes if o.disagreeing):
        return  # not all of it decided: torch's verdict stands
    # A point is counted once, however many of its derivatives were unreliable; each reason
    # counts the points it accounts for. Element by element (with a rerun) every outcome's
    # positions are the same points; in the exact mode they are each variable's own elements.
    where: dict[str, set[Any]] = {}
    for i, o in enumerate(outcomes):
        for position, why in o.unreliable.items():
            where.setdefault(why, set()).add(position if rerun is not None else (i, position))
    set_aside = set().union(*where.values())
    projection = None
    if rerun is not None:
        kept = torch.ones(count, dtype=torch.bool)
        kept[torch.tensor(sorted(set_aside), dtype=torch.long)] = False
        settled = rerun(kept) if bool(kept.any()) else GradcheckVerdict(None, verdict.fast_mode, None, 0)
        if settled.ok is False and _projection_alone(result, label, settled, outcomes):
            # every disagreement element by element was left out: what fails now is the projection
            projection = _projection_sentence(settled, what, count - len(set_aside))
            settled = GradcheckVerdict(True, settled.fast_mode, None, settled.points)
    else:
        settled = GradcheckVerdict(True, verdict.fast_mode, None, verdict.points)
    settled.unreliable_points = len(set_aside)
    settled.unreliable_reasons = {why: len(at) for why, at in where.items()}
    sentence = unreliable_sentence(len(set_aside), settled.unreliable_reasons, what)
    if settled.ok is None:
        settled.message = f"no point left: {sentence}"
    else:
        settled.message = sentence if settled.ok else f"{settled.message}; besides, {sentence}"
    setattr(result, label, settled)
    result.notes.append(f"{label}: {sentence}; those points are left out of it")
    if projection is not None:
        settled.message = f"{sentence}; {projection}"
        result.notes.append(f"{label}: {projection}")


def _projection_sentence(verdict: GradcheckVerdict, what: str, count: int) -> str:
    return (f"fast mode's random projection failed ({verdict.message}), yet central differences "
            f"element by element agree with autograd{what} at every one of the {count:,} points, and "
            "autograd agrees with the exact derivatives there: the projection's rounding, not the gradient")
