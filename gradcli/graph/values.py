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
    numel = tensor.numel() if numel is None else numel
    if numel == 1:  # long chains of scalars: 10x cheaper
        return [tensor.item()]
    if numel == 0:
        return []
    return _head(tensor.detach(), count, numel).reshape(-1)[:count].cpu().tolist()


def _head(tensor: Any, count: int, numel: int) -> Any:
    """The leading rows that hold the first `count` elements in row-major order.

    `reshape(-1)` of a non-contiguous tensor copies all of it: a transposed saved weight
    (GPT-2's 50257x768 embedding as the head's `mat2`) cost 0.18 s of CPU and 150 MB for
    six numbers. Narrowing first copies at most a few rows.
    """
    while tensor.dim() > 1:
        row = numel // tensor.shape[0]
        if row < count:
            return tensor[: -(-count // row)]
        tensor, numel = tensor[0], row
    return tensor


def summary(tensor: Any) -> dict[str, Any]:
    """Shape, dtype and a flat preview: enough to recognise a tensor without all of it."""
    numel = tensor.numel()  # a graph walk summarises every saved tensor: asked once
    return {
        "shape": list(tensor.shape),
        "dtype": dtype_name(tensor),
        "numel": numel,
        "preview": preview(tensor, numel=numel),
    }


def large_summary(tensor: Any) -> dict[str, Any]:
    """`summary` and the numbers that say what a large tensor holds: its 2-norm, minimum,
    maximum and mean (computed in float64), instead of all its values."""
    data = summary(tensor)
    values = tensor.detach().double()
    data["norm"] = float(values.norm())
    low, high = (values.aminmax() if values.numel() else (values.new_zeros(()), values.new_zeros(())))
    data["min"], data["max"], data["mean"] = float(low), float(high), float(values.mean())
    return data


def described(tensor: Any, whole: bool = True, most: int = 0) -> dict[str, Any]:
    """Shape, dtype and every value (or, past `most` elements and not `whole`, a `large_summary`)."""
    value = full_value(tensor) if whole or tensor.numel() <= most else large_summary(tensor)
    return {"shape": list(tensor.shape), "dtype": dtype_name(tensor), "value": value}


def all_finite(tensor: Any) -> bool:
    import torch

    tensor = tensor.detach()
    if tensor.is_floating_point() and tensor.layout == torch.strided and tensor.numel():
        # nan and ±inf reach the minimum or the maximum (aminmax propagates nan): one
        # vectorised pass, where isfinite().all() writes a bool per element first (GPT-2's
        # 38M-element embedding gradient: 0.26 s of CPU against 0.007 s)
        low, high = torch.aminmax(tensor)
        return bool(low.isfinite() and high.isfinite())
    return bool(torch.isfinite(tensor).all())


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
