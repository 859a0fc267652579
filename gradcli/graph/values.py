"""Tensors to plain data: what the trace keeps of a tensor once torch is done with it.

The inspection modules hand renderers plain Python (lists, floats, dicts), never tensors, so
the JSON, rich and DOT renderers need no torch. Non-finite numbers stay floats here (nan,
inf); only the JSON renderer decides how to write them.
"""

from __future__ import annotations

from typing import Any

#: Elements kept in a preview (saved tensors, the tree's one-line summaries).
PREVIEW = 6


_DTYPE_NAMES: dict[Any, str] = {}


def dtype_name(tensor: Any) -> str:
    """"float64" for torch.float64 (remembered per dtype: a graph walk asks once per node)."""
    dtype = tensor.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def full_value(tensor: Any) -> Any:
    """The tensor's values as a number (0-d) or a nested list, detached, on the CPU."""
    return tensor.detach().cpu().tolist()


def preview(tensor: Any, count: int = PREVIEW, numel: int | None = None) -> list[Any]:
    """The first `count` elements, flattened (`numel`, when the caller knows it, saves asking)."""
    if (tensor.numel() if numel is None else numel) == 1:  # long chains of scalars: 10x cheaper
        return [tensor.item()]
    return tensor.detach().reshape(-1)[:count].cpu().tolist()


def summary(tensor: Any) -> dict[str, Any]:
    """Shape, dtype and a flat preview: enough to recognise a tensor without all of it."""
    numel = tensor.numel()  # a graph walk summarises every saved tensor: asked once
    return {
        "shape": list(tensor.shape),
        "dtype": dtype_name(tensor),
        "numel": numel,
        "preview": preview(tensor, numel=numel),
    }


def described(tensor: Any) -> dict[str, Any]:
    """Shape, dtype and every value."""
    return {"shape": list(tensor.shape), "dtype": dtype_name(tensor), "value": full_value(tensor)}


def all_finite(tensor: Any) -> bool:
    import torch

    return bool(torch.isfinite(tensor.detach()).all())


def plain_scalar(value: Any) -> Any:
    """A saved non-tensor attribute as JSON-friendly data (ints, floats, tuples, dtypes...)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [plain_scalar(v) for v in value]
    try:  # SymInt / SymFloat / torch.Size elements behave like numbers
        number = float(value)
        return int(number) if number.is_integer() and not isinstance(value, float) else number
    except (TypeError, ValueError):
        return str(value)
