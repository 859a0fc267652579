"""The exact meaning of the shape and indexing rows of ops.py: numpy on object arrays.

Reshaping, transposing, subscripting, concatenating and gathering do no arithmetic: each
output element IS one input element. So the meaning of such a row is numpy's own operation on
the array of sympy scalars, with torch's conventions where numpy's differ (torch's `repeat` is
numpy's `tile`, `squeeze(dim)` keeps a dimension whose size is not 1, `gather` reads an index
smaller than the input). Integer and boolean indices must be known numbers (`--var
t=randint(...)`, a comparison of known values): a symbol cannot pick an element.

Nothing here imports torch, sympy or numpy: the callables receive the modules they need.
"""

from __future__ import annotations

import math
from typing import Any


def _dims(dim: int, ndim: int) -> int:
    size = max(ndim, 1)
    if not -size <= dim < size:
        raise IndexError(f"dimension {dim} is out of range for a {ndim}-d tensor")
    return dim % size


def sizes(value: Any) -> tuple[int, ...]:
    """A sizes argument (an int, or a tuple of them) as a tuple of ints."""
    if isinstance(value, (tuple, list)):
        return tuple(int(v) for v in value)
    return (int(value),)


def reshape(sp: Any, np: Any, x: Any, shape: Any) -> Any:
    return np.asarray(np.reshape(x, sizes(shape)), dtype=object)


def flatten(sp: Any, np: Any, x: Any, start_dim: int = 0, end_dim: int = -1) -> Any:
    if x.ndim == 0:
        return x.reshape(1)
    start, end = _dims(start_dim, x.ndim), _dims(end_dim, x.ndim)
    if start > end:
        raise ValueError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:]
    return x.reshape(shape)


def unflatten(sp: Any, np: Any, x: Any, dim: int, sizes_: Any) -> Any:
    axis = _dims(dim, x.ndim)
    parts = list(sizes(sizes_))
    if parts.count(-1) == 1:
        known = math.prod(p for p in parts if p != -1)
        parts[parts.index(-1)] = x.shape[axis] // known if known else 0
    if math.prod(parts) != x.shape[axis]:
        raise ValueError(f"unflatten: sizes {tuple(parts)} do not multiply to {x.shape[axis]}")
    return x.reshape(x.shape[:axis] + tuple(parts) + x.shape[axis + 1:])


def transpose(sp: Any, np: Any, x: Any, dim0: int, dim1: int) -> Any:
    if x.ndim < 2 and dim0 in (0, -1) and dim1 in (0, -1):
        return x
    return np.swapaxes(x, _dims(dim0, x.ndim), _dims(dim1, x.ndim))


def permute(sp: Any, np: Any, x: Any, dims: Any) -> Any:
    order = tuple(_dims(d, x.ndim) for d in sizes(dims))
    if sorted(order) != list(range(x.ndim)):
        raise ValueError(f"permute: dims {sizes(dims)} do not name each of the {x.ndim} dimensions once")
    return np.transpose(x, order)


def t_attribute(sp: Any, np: Any, x: Any) -> Any:
    return np.transpose(x)  # torch's .T reverses all dimensions (a matrix: its transpose)


def mt_attribute(sp: Any, np: Any, x: Any) -> Any:
    if x.ndim < 2:
        raise ValueError("tensor.mT is only supported on matrices or batches of matrices")
    return np.swapaxes(x, -1, -2)


def squeeze(sp: Any, np: Any, x: Any, dim: Any = None) -> Any:
    if dim is None:
        return x.reshape(tuple(s for s in x.shape if s != 1))
    axes = {_dims(d, x.ndim) for d in (dim if isinstance(dim, tuple) else (dim,))}
    return x.reshape(tuple(s for i, s in enumerate(x.shape) if not (i in axes and s == 1)))


def unsqueeze(sp: Any, np: Any, x: Any, dim: int) -> Any:
    return np.expand_dims(x, _dims(dim, x.ndim + 1))


def expand(sp: Any, np: Any, x: Any, shape: Any) -> Any:
    wanted = sizes(shape)
    lead = len(wanted) - x.ndim
    if lead < 0:
        raise ValueError(f"expand: {len(wanted)} sizes for a {x.ndim}-d tensor")
    full = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(wanted))
    return np.asarray(np.broadcast_to(x, full), dtype=object)


def repeat(sp: Any, np: Any, x: Any, repeats: Any) -> Any:
    times = sizes(repeats)
    if len(times) < x.ndim:
        raise ValueError("repeat: give at least one count per dimension of the tensor")
    return np.asarray(np.tile(x, times), dtype=object)


def cat(sp: Any, np: Any, tensors: Any, dim: int = 0) -> Any:
    parts = [np.asarray(t, dtype=object) for t in tensors]
    return np.asarray(np.concatenate(parts, axis=_dims(dim, parts[0].ndim)), dtype=object)


def stack(sp: Any, np: Any, tensors: Any, dim: int = 0) -> Any:
    parts = [np.asarray(t, dtype=object) for t in tensors]
    return np.asarray(np.stack(parts, axis=_dims(dim, parts[0].ndim + 1)), dtype=object)


def split_points(length: int, split: Any, chunks: bool) -> list[int]:
    """Where torch.chunk (chunks=True) or torch.split cuts a dimension of `length`."""
    if chunks:
        count = int(split)
        if count <= 0:
            raise ValueError("chunk expects `chunks` to be greater than 0")
        step = -(-length // count) if length else 1
        return list(range(step, length, step))
    if isinstance(split, (tuple, list)):
        parts = sizes(split)
        if sum(parts) != length:
            raise ValueError(f"split sizes {parts} do not add up to {length}")
        return [sum(parts[:i + 1]) for i in range(len(parts) - 1)]
    step = int(split)
    if step <= 0:
        raise ValueError("split expects a split size greater than 0")
    return list(range(step, length, step))


def chunk(sp: Any, np: Any, x: Any, chunks: Any, dim: int = 0) -> tuple[Any, ...]:
    axis = _dims(dim, x.ndim)
    return tuple(np.split(x, split_points(x.shape[axis], chunks, True), axis=axis))


def split(sp: Any, np: Any, x: Any, split_size_or_sections: Any, dim: int = 0) -> tuple[Any, ...]:
    axis = _dims(dim, x.ndim)
    return tuple(np.split(x, split_points(x.shape[axis], split_size_or_sections, False), axis=axis))


def integers(sp: Any, np: Any, value: Any) -> Any:
    """An index tensor's sympy values as a numpy int array (they must be known integers)."""
    array = np.asarray(value, dtype=object)
    out = np.empty(array.shape, dtype=np.int64)
    for position, item in np.ndenumerate(array):
        number = sp.sympify(item)
        if not number.is_Integer:
            raise TypeError("an index must hold known integers (randint, arange), not variables")
        out[position] = int(number)
    return out


def booleans(sp: Any, np: Any, value: Any) -> Any:
    """A mask's sympy values as a numpy bool array (each must be known true or false)."""
    array = np.asarray(value, dtype=object)
    out = np.empty(array.shape, dtype=bool)
    for position, item in np.ndenumerate(array):
        truth = sp.sympify(item)
        if truth in (sp.Integer(0), sp.Integer(1)):  # a bool tensor read as numbers
            truth = sp.true if truth else sp.false
        if truth not in (sp.true, sp.false):
            raise TypeError("a boolean mask must be known true or false here, not a condition on variables")
        out[position] = bool(truth)
    return out


def gather(sp: Any, np: Any, x: Any, dim: int, index: Any) -> Any:
    axis = _dims(dim, x.ndim)
    idx = integers(sp, np, index)
    if idx.ndim != x.ndim:
        raise ValueError("gather: index and input must have the same number of dimensions")
    # torch reads an index smaller than the input in the other dimensions: the leading part.
    part = x[tuple(slice(None) if d == axis else slice(0, idx.shape[d]) for d in range(x.ndim))]
    return np.asarray(np.take_along_axis(part, idx, axis=axis), dtype=object)


def index_select(sp: Any, np: Any, x: Any, dim: int, index: Any) -> Any:
    idx = integers(sp, np, index)
    if idx.ndim > 1:
        raise ValueError("index_select: the index must be 1-d")
    return np.asarray(np.take(x, idx.reshape(-1), axis=_dims(dim, x.ndim)), dtype=object)


def masked_fill(sp: Any, np: Any, x: Any, mask: Any, value: Any) -> Any:
    chosen = np.asarray(mask, dtype=object)
    fill = np.asarray(value, dtype=object)
    if fill.ndim:
        raise ValueError("masked_fill only supports a 0-dimensional value")
    shape = np.broadcast_shapes(x.shape, chosen.shape)
    if shape != x.shape:
        raise ValueError(f"the mask {list(chosen.shape)} does not broadcast to the input {list(x.shape)}")
    # A mask on variables (x > 0) is a branch, as where's condition is.
    pick = np.frompyfunc(lambda c, v: sp.Piecewise((fill.item(), c), (v, True)), 2, 1)
    return np.asarray(pick(np.broadcast_to(chosen, shape), x), dtype=object)


def getitem(sp: Any, np: Any, x: Any, index: Any) -> Any:
    return np.asarray(x[numpy_index(sp, np, index)], dtype=object)


def numpy_index(sp: Any, np: Any, index: tuple[Any, ...]) -> tuple[Any, ...]:
    """A subscript's evaluated items as numpy reads them (torch reads them alike)."""
    items = []
    for item in index:
        if item is None or item is Ellipsis or isinstance(item, (int, slice)):
            items.append(item)
        elif hasattr(item, "tolist") and not isinstance(item, np.ndarray):  # a torch index tensor
            listed = item.tolist()
            items.append(np.asarray(listed, dtype=bool if isinstance(listed, bool) or "bool" in str(item.dtype) else np.int64))
        elif isinstance(item, (tuple, list)):
            items.append(np.asarray([int(v) for v in item], dtype=np.int64))
        else:
            array = np.asarray(item, dtype=object)
            first = sp.sympify(array.flat[0]) if array.size else sp.Integer(0)
            if first in (sp.true, sp.false) or getattr(first, "is_Relational", False):
                mask = booleans(sp, np, array)
                items.append(mask.item() if mask.ndim == 0 else mask)
            else:
                ints = integers(sp, np, array)
                items.append(int(ints) if ints.ndim == 0 else ints)
    return tuple(items)


def arange(sp: Any, np: Any, start: Any, end: Any = None, step: Any = 1) -> Any:
    low, high = (0, start) if end is None else (start, end)
    values = [low + step * i for i in range(max(0, math.ceil((high - low) / step)))]
    return np.asarray([sp.sympify(v) for v in values], dtype=object)
