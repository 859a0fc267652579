"""When a Function's backward and finite differences disagree: is it finite differences' fault?

check-function compares backward's Jacobian with central differences entry by entry
(jacobian.py). A disagreement is backward's fault unless the difference itself is broken
there: the step is lost to rounding, leaves the domain, or the forward does not move over it
(verify/finite_differences/arbiter.py reads why from what went into the difference). With a reference, sympy's exact
derivative decides (`settle_with_reference`); without one the disagreement stands and a note
says where the differences are plainly broken (`explain_without_reference`).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..finite_differences.arbiter import EPS, FLAT_FORWARD, LEAVES_DOMAIN, STEP_ROUNDED, Differences, reason
from ..finite_differences.gradchecks import GradcheckVerdict
from ..finite_differences.jacobian import InputCheck, flat_output
from ..finite_differences.precision import LONG_STEP, moved_output

#: The reasons that break finite differences whatever the derivative is.
PLAINLY_BROKEN = (STEP_ROUNDED, LEAVES_DOMAIN, FLAT_FORWARD)


def explain_without_reference(result: Any, fn: Any, tensors: dict[str, torch.Tensor]) -> None:
    """Without a reference there is no exact derivative to settle a disagreement, so it
    stands; but where the finite differences are plainly broken (the step is lost to
    rounding, leaves the domain, or the forward does not move) the note says so."""
    broken = {why: n for why, n in _reasons(result.first, fn, tensors).items() if why in PLAINLY_BROKEN}
    if broken:
        result.notes.append(f"finite differences are unreliable at {sum(broken.values()):,} of the disagreeing "
                            f"Jacobian entries ({_listed(broken)}): give --ref EXPR to decide them with the exact "
                            "derivative")


def settle_with_reference(result: Any, fn: Any, tensors: dict[str, torch.Tensor]) -> None:
    """Finite differences do not overrule an exact derivative (verify/finite_differences/arbiter.py): where they
    disagree with your backward but the reference's derivative agrees with it everywhere,
    the disagreeing entries are finite differences' fault, counted with their reason."""
    failed = result.gradcheck.ok is False or not all(c.ok for c in result.first)
    reference_agrees = (result.ref_forward is not None and result.ref_forward.ok and result.ref_first
                        and all(c.ok for c in result.ref_first))
    if not failed or not reference_agrees:
        return
    reasons = _reasons(result.first, fn, tensors)
    for check in result.first:
        check.count, check.mismatches, check.max_abs_err = 0, [], 0.0
    count = sum(reasons.values())
    if count:
        sentence = (f"finite differences are unreliable at {count:,} Jacobian entr{'ies' if count != 1 else 'y'} "
                    f"({_listed(reasons)}), where your backward agrees with the derivative of {result.ref}")
        result.notes.append(f"gradcheck: {sentence}")
    if result.gradcheck.ok is False:
        result.gradcheck = GradcheckVerdict(True, result.gradcheck.fast_mode, sentence if count else None,
                                            result.gradcheck.points, count, reasons)


def _reasons(checks: Sequence[InputCheck], fn: Any, tensors: dict[str, torch.Tensor]) -> dict[str, int]:
    """Why finite differences mislead at each disagreeing entry of `checks`, counted by
    reason in the order first met."""
    reasons: dict[str, int] = {}
    for check in checks:
        for i, j in check.wrong().nonzero().tolist():
            why = _entry_reason(fn, tensors, check.name, i, j, check.got[i, j].item())
            reasons[why] = reasons.get(why, 0) + 1
    return reasons


def _listed(reasons: dict[str, int]) -> str:
    """'reason: count; ...', the most frequent first."""
    return "; ".join(f"{why}: {n:,}" for why, n in sorted(reasons.items(), key=lambda item: -item[1]))


def _entry_reason(fn: Any, tensors: dict[str, torch.Tensor], name: str, i: int, j: int, exact: float) -> str:
    """Why the central difference of output i in element j of `name` misleads."""
    flat = tensors[name].reshape(-1)
    with torch.no_grad():
        plus, minus = (moved_output(fn, tensors, name, flat, j, sign * EPS)[i:i + 1] for sign in (1, -1))
    diffs = Differences(flat[j:j + 1].to(torch.float64), plus, minus, (plus - minus) / (2 * EPS))
    why = reason(diffs, 0, exact)
    if why == FLAT_FORWARD:
        # f(x + h) == f(x - h) is also the vertex of a parabola, where the central difference
        # (0) is right: flat only if the forward does not move over a one-sided step either.
        # And an output that does not move over a step a thousand times longer does not depend
        # on this element here (another row of a softmax, a piecewise-constant forward): the
        # central difference's 0 is then right, and backward's value is what is wrong. (A
        # forward rounding to float32 inside hides a 1e-6 step, not a 1e-3 one.)
        with torch.no_grad():
            centre = flat_output(fn, tensors)[i].to(torch.float64)
            far = moved_output(fn, tensors, name, flat, j, LONG_STEP * max(1.0, abs(float(flat[j]))))[i]
        return why if bool(centre == plus[0]) and not bool(far == centre) else ""
    return why
