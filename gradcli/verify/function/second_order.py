"""Why double backward is wrong, or what was seen where no cause can be shown.

check-function calls this when its second-order comparison is done. It gathers the
evidence diagnose.py asks for before naming a cause at order 2 (forward and backward
replayed by hand, verify/function/replay.py) and, where double backward is not finite, the node and line
the first nan came out of (origin.py).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from . import diagnose
from ..finite_differences.jacobian import InputCheck, analytical, compare_blocks, leaves
from .origin import nan_origin
from .replay import replay
from .inputs import Inputs
from .userfile import source_file


def explain_second_order(
    cls: type, inputs: Inputs, tensors: dict[str, torch.Tensor], weights: torch.Tensor, gradient: Any,
    first: Sequence[InputCheck], second: Sequence[InputCheck], expected: dict[str, torch.Tensor],
    kinks: dict[str, torch.Tensor],
) -> tuple[list[Any], list[str]]:
    """(causes, seen) of the second-order comparison `second` (`expected`: its finite
    differences, `kinks`: its entries set apart)."""
    first_ok = all(c.ok for c in first)
    causes: list[Any] = []  # causes/cause.py Cause
    if first_ok and not all(c.ok for c in second):
        try:
            replayed = replay(cls, inputs, tensors, weights)
            differentiable = replayed.gradient(leaves(tensors)).requires_grad
            again = compare_blocks(analytical(replayed.gradient, tensors), expected, tensors, "grad", kinks)
            intermediates = replayed.intermediates
        except Exception:  # noqa: BLE001 - the user's code run by hand: no evidence, so no cause
            intermediates, again, differentiable = [], None, True
        causes = diagnose.second_order_causes(
            second, first_ok=first_ok, intermediates=intermediates, replayed=again,
            replay_differentiable=differentiable,
        )
    origin = None
    if not all(bool(torch.isfinite(c.got).all()) for c in second):
        try:
            origin = nan_origin(gradient, tensors, source_file(cls))
        except Exception:  # noqa: BLE001 - a place not found is only not said
            origin = None
    return causes, diagnose.what_was_seen(second, 2, first, origin)

