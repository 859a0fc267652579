"""The formulas' values at the traced values, computed the way torch's backward does (each
edge's gradient summed down to its input's shape where it was broadcast), and the values
`--flow`'s hooks saw at the same node and edge.

Formulas are evaluated with exact/symbolic.py's torch walker: the same evaluation `check`
trusts for sympy's derivative, so a mismatch here is between formula and torch, not between
two evaluators.
"""

from __future__ import annotations

from typing import Any

#: float64 formulas and torch's kernels round differently; beyond this they disagree. A
#: float32 trace is compared at float32's precision (its forward values are float32).
TOLERANCES = {"float64": (1e-7, 1e-10), "float32": (1e-4, 1e-6)}
RTOL, ATOL = TOLERANCES["float64"]


def evaluate_array(array: Any, env: dict[Any, Any], shape: tuple[int, ...]) -> Any:
    """A 0-d formula array evaluated over whole tensors and fitted to `shape`, or an array of
    per-element formulas evaluated one by one."""
    import torch

    from ..exact.symbolic import evaluate

    if array.ndim == 0:
        return fit(evaluate(array.item(), env, 1), shape)
    values = [evaluate(expr, env, 1).reshape(-1)[0] for expr in array.flat]
    return fit(torch.stack(values).reshape(array.shape), shape)


def fit(value: Any, shape: tuple[int, ...]) -> Any:
    """`value` expanded or summed to `shape`, as autograd fits a gradient to its input."""
    import torch

    value = torch.as_tensor(value, dtype=torch.float64)
    if tuple(value.shape) == tuple(shape):
        return value
    if value.numel() == 1:
        return value.reshape(()).expand(shape).clone()
    full = torch.broadcast_shapes(tuple(value.shape), tuple(shape))
    value = value.expand(full)
    return value.sum() if not shape else value.sum_to_size(shape)


def compare(value: Any, seen: Any, tolerance: tuple[float, float] = (RTOL, ATOL)) -> bool | None:
    """Whether a formula's value equals what torch's hook saw (None: nothing seen)."""
    import torch

    rtol, atol = tolerance
    if seen is None:
        return None
    seen_tensor = torch.as_tensor(_floats(seen), dtype=torch.float64)
    if seen_tensor.shape != value.shape:
        seen_tensor = fit(seen_tensor, tuple(value.shape))
    return bool(torch.allclose(value, seen_tensor, rtol=rtol, atol=atol, equal_nan=True))


def _floats(value: Any) -> Any:
    """A plain value from the flow (nested lists, 'nan'/'inf' strings in JSON form) as floats."""
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return float(value)


def bind(env: dict[Any, Any], symbols: Any, value: Any) -> None:
    """Give each symbol of a value its number: the whole tensor, or one element each."""
    import numpy as np

    if symbols.ndim == 0:
        env[symbols.item()] = value
        return
    for index, symbol in zip(np.ndindex(*symbols.shape), symbols.flat):
        env[symbol] = value[index]


def fitted_sum(values: list[Any], shape: tuple[int, ...]) -> Any:
    """The gradients arriving by each path, each fitted to `shape`, summed (as autograd does)."""
    import torch

    found = torch.zeros(shape, dtype=torch.float64)
    for value in values:
        found = found + fit(value, shape)
    return found


def plain(value: Any) -> Any:
    from ..graph.values import full_value

    return full_value(value)
