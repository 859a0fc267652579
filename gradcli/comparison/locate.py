"""Where the candidate's gradients start to differ: the first module, in backward order.

Both runs were watched (side.py): each computing module's output, and the gradients at its
output and its input. Backward runs the modules in reverse; the first one whose input
gradient (or, for the first layer, whose own parameters' gradients) leaves tolerance is
where the difference enters backward. Whether that module's forward output already
differed tells a forward divergence (a different activation, e.g. another dropout mask,
which backward then carries) from a backward one (the same activations, a different
gradient, e.g. one flushed to zero in float16); for a forward one, the first module in
forward order whose output left tolerance is named too.
"""

from __future__ import annotations

from typing import Callable

import torch

from .gradients import ParamComparison, compare_gradient
from .result import Divergence
from .side import SideRun


def locate(reference: SideRun, candidate: SideRun, tolerance_of: Callable[[str], float],
           parameters: list[ParamComparison], modules: dict[str, str]) -> Divergence | None:
    """The first divergent module, or None when no watched module differs."""
    order = [path for path in reference.modules if path in candidate.modules]
    flagged = {modules.get(p.name) for p in parameters if not p.agrees}
    first_forward = next((path for path in order
                          if _exceeds(reference.modules[path].output, candidate.modules[path].output, tolerance_of(path))), None)
    for path in reversed(order):
        ref, cand = reference.modules[path], candidate.modules[path]
        tolerance = tolerance_of(path)
        grad_err = _rel_err(ref.input_grad, cand.input_grad)
        own = [p for p in parameters if modules.get(p.name) == path and not p.agrees]
        if not ((grad_err is not None and grad_err > tolerance) or path in flagged):
            continue
        if grad_err is None or grad_err <= tolerance:  # the first layer: its parameters tell
            grad_err = max((p.rel_err for p in own if p.rel_err is not None), default=grad_err or 0.0)
        forward_err = _rel_err(ref.output, cand.output)
        origin = ref.origin
        return Divergence(
            module=path, module_class=ref.cls, grad_rel_err=grad_err, tolerance=tolerance, forward_rel_err=forward_err,
            forward_differs=forward_err is not None and forward_err > tolerance,
            first_forward=f"{first_forward} ({reference.modules[first_forward].cls})" if first_forward else None, file=origin.file if origin else None, line=origin.line if origin else None,
            code=origin.code if origin else None,
        )
    return None


def _rel_err(reference: torch.Tensor | None, candidate: torch.Tensor | None) -> float | None:
    if reference is None or candidate is None or reference.shape != candidate.shape:
        return None
    return compare_gradient("", reference, candidate, 0.0).rel_err


def _exceeds(reference: torch.Tensor | None, candidate: torch.Tensor | None, tolerance: float) -> bool:
    err = _rel_err(reference, candidate)
    return err is not None and err > tolerance
