"""Forward calls whose output is not finite, told apart: an infinity the user wrote as a
constant (masked_fill(mask, float("-inf"))), and a softmax whose input rows are -inf
throughout (0/0). The recorder notes them while forward runs (record.py);
verify/causes/masked_rows.py explains them and tries the fixes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

#: The calls whose fully -inf rows are 0/0.
SOFTMAX = ("softmax", "log_softmax", "_softmax", "_log_softmax")
#: Calls that write a constant into a tensor: an inf from them, with finite tensor inputs, is written.
FILLS = ("masked_fill", "masked_fill_", "fill_", "full", "full_like", "new_full", "where", "index_fill",
         "index_fill_", "fill_diagonal_", "clamp", "clamp_min", "clamp_max")


@dataclass(frozen=True)
class MaskedRows:
    """Where softmax met fully masked rows: how many, of how many."""

    rows: int  # rows of softmax's input that are -inf at every position
    total: int  # rows in all


def written_nonfinite(call: str, arguments: Sequence[Any], target_was_finite: bool | None = None) -> bool:
    """Whether `call` wrote a non-finite constant the user gave it (masked_fill(m, -inf)):
    one of its plain-number arguments is ±inf or nan, and none of its tensors is non-finite.
    An in-place fill (masked_fill_) holds the constant once it ran: its target (the first
    argument) is judged as it was before, `target_was_finite`."""
    if call not in FILLS:
        return False
    if target_was_finite is not None:
        if not target_was_finite:
            return False
        arguments = arguments[1:]
    numbers = [a for a in arguments if isinstance(a, (int, float)) and not isinstance(a, bool)]
    tensors = [a for a in arguments if isinstance(a, torch.Tensor) and a.is_floating_point()]
    return any(not math.isfinite(a) for a in numbers) and all(bool(torch.isfinite(t).all()) for t in tensors)


def masked_rows(call: str, arguments: Sequence[Any], kwargs: dict[str, Any], output: Any) -> MaskedRows | None:
    """For a softmax whose output has nan while its input has none: how many of its rows are
    -inf throughout (None when it is not that)."""
    if call not in SOFTMAX or not isinstance(output, torch.Tensor) or not bool(torch.isnan(output).any()):
        return None
    x = next((a for a in arguments if isinstance(a, torch.Tensor)), None)
    if x is None or not x.is_floating_point() or bool(torch.isnan(x).any()):
        return None
    dim = softmax_dim(arguments, kwargs, x)
    rows = (x == -math.inf).all(dim=dim)
    if not bool(rows.any()):
        return None
    return MaskedRows(int(rows.sum()), rows.numel())


def softmax_dim(arguments: Sequence[Any], kwargs: dict[str, Any], x: torch.Tensor) -> int:
    dim = kwargs.get("dim")
    if dim is None:
        dim = next((a for a in arguments[1:] if isinstance(a, int) and not isinstance(a, bool)), -1)
    return int(dim) if dim is not None else (-1 if x.dim() else 0)
