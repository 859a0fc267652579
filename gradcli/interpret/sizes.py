"""Sizes and indices written as expressions (`reshape(-1, V)`, `x[:, :n - 1]`, `arange(n)`),
read as the Python ints torch wants, and the ops whose sizes say how much memory they take
(expand, repeat, arange) bounded before torch allocates.
"""

from __future__ import annotations

import math
from typing import Any

from .. import limits
from ..errors import ArgumentError, LimitError, Span


def integer(value: Any, span: Span | None, what: str) -> int:
    """A size or index written as any expression (V, n - 1, a 0-d tensor) as a Python int."""
    if hasattr(value, "numel") and value.numel() == 1 and not value.requires_grad:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        raise ArgumentError(f"{what} must be an integer, not {value!r}"[:200], span=span)
    return int(value)


def check_growth(name: str, args: list[Any], kwargs: dict[str, Any], span: Span | None) -> None:
    """expand, repeat and arange make as many elements as their sizes say: bound them first."""
    if name == "arange":
        bound = dict(zip(("start", "end", "step"), args)) | kwargs
        start, end, step = bound.get("start"), bound.get("end"), bound.get("step", 1)
        low, high = (0, start) if end is None else (start, end)
        shape: tuple[int, ...] = (max(0, -(-(high - low) // step)) if step else 0,)
    elif name in ("expand", "repeat"):
        sizes = args[1] if isinstance(args[1], tuple) else (args[1],)
        if name == "repeat":
            shape = (math.prod(sizes) * args[0].numel(),)
        else:
            shape = tuple(abs(s) for s in sizes)
    else:
        return
    check_size(shape, span)


def check_size(shape: tuple[int, ...], span: Span | None) -> None:
    size = math.prod(shape)
    if size > limits.MAX_ELEMENTS:
        raise LimitError(
            f"the result would have {size:,} elements (shape {list(shape)}); the limit is "
            f"{limits.MAX_ELEMENTS:,}",
            span=span,
        )
