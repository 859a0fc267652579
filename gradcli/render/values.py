"""Short, stable text for numbers and nested lists, and for the source an operation came from.

Console output shows at most a handful of numbers per value (4 significant digits); the JSON
has them all. Nested lists are flattened iteratively, so no value can hit a recursion limit.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import Span

#: Values with at most this many numbers print whole (nested); longer ones as a flat preview.
WHOLE = 9
PREVIEW = 6
EXCERPT = 40


def fmt_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int):
        return str(value)
    text = f"{value:.4g}"
    # Keep floats recognisable as floats: 2.0 prints "2.0", not "2".
    return text if any(c in text for c in ".en") else text + ".0"


def fmt_value(value: Any) -> str:
    """A number, a nested list (whole when small, else a preview with its size), a tensor
    summary (a model's large tensor, shown as its whole list would be), or None."""
    if value is None:
        return "None"
    if isinstance(value, dict):
        head = f"[{', '.join(fmt_number(v) for v in value['preview'][:PREVIEW])}, …] (shape {value['shape']}"
        if "mean" in value:  # a large tensor's summary: what it holds in three numbers
            head += (f", {value['dtype']}, min {fmt_number(value['min'])}, max {fmt_number(value['max'])}, "
                     f"mean {fmt_number(value['mean'])}")
        return head + ")"
    if not isinstance(value, list):
        return fmt_number(value)
    flat = flatten(value, WHOLE + 1)
    if len(flat) <= WHOLE:
        return _nested(value)
    shape = _shape(value)
    head = ", ".join(fmt_number(v) for v in flat[:PREVIEW])
    return f"[{head}, …] (shape {shape})"


def flatten(value: Any, limit: int) -> list[Any]:
    """Up to `limit` numbers of a nested list, in order."""
    out: list[Any] = []
    stack = [value]
    while stack and len(out) < limit:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            out.append(item)
    return out


def _nested(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_nested(v) for v in value) + "]"  # small: at most WHOLE numbers
    return fmt_number(value)


def _shape(value: Any) -> list[int]:
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        value = value[0] if value else None
    return shape


def source_excerpt(source: str, span: Span | None) -> str:
    """The text a span covers (its first line), shortened for one line of output."""
    if span is None or not source:
        return ""
    lines = source.splitlines()
    if not 0 < span.line <= len(lines):
        return ""
    line = lines[span.line - 1]
    end = span.end_col if span.end_line == span.line else len(line)
    text = line[span.col:end].strip()
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def finite_safe(value: Any) -> Any:
    """`value` with every non-finite float replaced by "nan", "inf" or "-inf".

    Numbers that are not Python's own (numpy's float64 and float32, a tensor, an ndarray: a
    value from the user's code, such as a `given` input) become Python values first, so that
    a nan among them is replaced too instead of crashing the JSON encoder.
    Recursion is bounded: the document nests a few levels plus a tensor's dimensions.
    """
    kind = type(value)
    if kind is float:
        return value if value - value == 0 else _number(value)  # inf - inf and nan - nan are nan
    if kind is list or kind is tuple:
        return [finite_safe(item) for item in value]
    if kind is dict:
        return {key: finite_safe(item) for key, item in value.items()}
    if kind in (str, int, bool) or value is None:
        return value
    if isinstance(value, float):  # numpy.float64 and other float subclasses
        return finite_safe(float(value))
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays, tensors
    if callable(tolist) and type(value).__module__.partition(".")[0] in ("numpy", "torch"):
        return finite_safe(tolist())
    return value


def _number(value: float) -> Any:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value
