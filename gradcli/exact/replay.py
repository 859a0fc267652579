"""The exact gradient arriving at one node of a recorded computation: its downstream, replayed in sympy.

A user's model has no formula to differentiate, but graph/evidence.py recorded every torch
call it made, with its arguments and which earlier results they were. From one node on, the
calls that depend on it are replayed on sympy numbers, one symbol per element of that node's
value (the others are constants: the float values torch computed), through the operations
table (language/ops.py: exp, cos, sum ...), Python's operators and `linear`. The result is
the loss as a formula of those elements; sympy differentiates it and mpmath evaluates each
derivative at 50 digits at the values torch had. That is the exact gradient arriving at the
node, to hold autograd's against (verify/causes/cancellation.py).

A call outside what is replayed, a node with more than MAX_ELEMENTS elements, a downstream
of more than MAX_CALLS calls, or a replayed loss that is not the value torch computed makes
`exact_gradient` return None: no exact value, no claim.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

#: Most elements of the node given one symbol each.
MAX_ELEMENTS = 64
#: Most calls replayed downstream of the node.
MAX_CALLS = 200

_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "truediv": lambda a, b: a / b, "pow": lambda a, b: a ** b,
    "radd": lambda a, b: b + a, "rsub": lambda a, b: b - a, "rmul": lambda a, b: b * a,
    "rdiv": lambda a, b: b / a, "rtruediv": lambda a, b: b / a, "rpow": lambda a, b: b ** a,
}


class Unreplayable(Exception):
    """A call the exact replay does not know."""


def exact_gradient(evidence: Any, start: Any) -> torch.Tensor | None:
    """d loss / d (start's value), element by element, at 50 digits (as float64), or None."""
    import sympy

    from .arbitrate import UNDEFINED, exact_function

    value = start.output
    if value is None or start.result_id is None or value.numel() > MAX_ELEMENTS or not value.is_floating_point():
        return None
    symbols = [sympy.Symbol(f"h{k}", real=True) for k in range(value.numel())]
    known: dict[int, Any] = {start.result_id: _array(symbols, tuple(value.shape))}
    nodes = evidence.nodes
    after = nodes[nodes.index(start) + 1:] if start in nodes else nodes  # a leaf comes before every node
    loss = None
    replayed = 0
    try:
        for node in after:
            if node.result_id is None or not any(i in known for i in node.argument_ids if i is not None):
                continue
            replayed += 1
            if replayed > MAX_CALLS or not _faithful(node):
                return None
            known[node.result_id] = _apply(node, known)
            loss = known[node.result_id]
    except (Unreplayable, TypeError, ValueError, IndexError, KeyError):
        return None
    last = nodes[-1] if nodes else None
    if loss is None or last is None or last.result_id not in known or np.asarray(loss).size != 1:
        return None
    loss = np.asarray(known[last.result_id], dtype=object).reshape(-1)[0]
    values = value.detach().to(torch.float64).reshape(-1).tolist()
    found = []
    for symbol in symbols:
        exact = exact_function(sympy.diff(loss, symbol), symbols)(*values)
        found.append(math.nan if exact is UNDEFINED else exact)
    return torch.tensor(found, dtype=torch.float64).reshape(value.shape)


def _array(items: list[Any], shape: tuple[int, ...]) -> Any:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(shape)


def _constant(value: Any) -> Any:
    """A recorded tensor (or number) as sympy numbers of the same values."""
    import sympy

    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool or not (value.is_floating_point() or value.dtype in (torch.int32, torch.int64)):
            raise Unreplayable(f"a {value.dtype} argument")
        flat = [sympy.Float(v, 50) if isinstance(v, float) else sympy.Integer(v)
                for v in value.detach().reshape(-1).tolist()]
        return _array(flat, tuple(value.shape))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unreplayable(f"an argument {type(value).__name__}")
    return sympy.Float(value, 50) if isinstance(value, float) else sympy.Integer(value)


def _apply(node: Any, known: dict[int, Any]) -> Any:
    """One recorded call on sympy arrays."""
    import sympy

    from ..language.ops import OPS

    count = len(node.argument_ids)
    args = [known[i] if i in known else _constant(a) for i, a in zip(node.argument_ids, node.inputs[:count])]
    name = getattr(node.func, "__name__", "")
    plain = name.strip("_")
    if name.startswith("__") and plain in _BINARY and len(args) == 2:
        return _BINARY[plain](np.asarray(args[0], dtype=object), np.asarray(args[1], dtype=object))
    if plain in ("neg", "negative") and len(args) == 1:
        return -np.asarray(args[0], dtype=object)
    if plain in ("add", "sub", "mul", "div", "true_divide", "pow") and len(args) == 2 and not node.kwargs:
        key = {"true_divide": "div"}.get(plain, plain)
        return _BINARY[key](np.asarray(args[0], dtype=object), np.asarray(args[1], dtype=object))
    if plain == "linear":
        weight = args[1] if len(args) > 1 else _constant(node.kwargs["weight"])
        bias = args[2] if len(args) > 2 else node.kwargs.get("bias")
        out = np.dot(np.asarray(args[0], dtype=object), np.asarray(weight, dtype=object).T)
        return out + np.asarray(bias if not isinstance(bias, torch.Tensor) else _constant(bias), dtype=object) \
            if bias is not None else out
    op = OPS.get(plain)
    if op is None:
        raise Unreplayable(plain)
    kwargs = {k: v for k, v in node.kwargs.items()}
    if op.kind == "elementwise":
        if len(args) != 1 or kwargs:
            raise Unreplayable(plain)
        fn = np.frompyfunc(lambda a: op.sympy(sympy, a), 1, 1)
        return fn(np.asarray(args[0], dtype=object))
    if op.kind == "reduction" and plain in ("sum", "mean") and len(args) <= 3:
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        return op.sympy(sympy, np, np.asarray(args[0], dtype=object), dim, keepdim)
    raise Unreplayable(plain)


#: How close one replayed call, on the very values torch gave it, must come to torch's result
#: (a few roundings of the dtype are far below; a call replayed as another is far above).
SAME_VALUE = 1e-3
#: Most elements of one call checked that way.
MAX_CHECKED = 4096


def _faithful(node: Any) -> bool:
    """Whether the call, replayed on the recorded values of its arguments (each one operation,
    so no cancellation builds up), gives what torch recorded: the replay is the computation,
    not a guess at it. (The loss itself cannot be compared: its forward may have lost its
    digits to the very cancellation being diagnosed.)"""
    if node.output is None or node.output.numel() > MAX_CHECKED:
        return False
    replayed = np.asarray(_apply(node, {}), dtype=object).reshape(-1)
    recorded = node.output.detach().to(torch.float64).reshape(-1).tolist()
    if replayed.size != len(recorded):
        return False
    for exact, got in zip(replayed, recorded):
        exact = float(exact)
        if not (math.isfinite(exact) and math.isfinite(got)):
            return exact == got or (math.isnan(exact) and math.isnan(got))
        if abs(got - exact) > SAME_VALUE * max(abs(exact), abs(got)) + 1e-30:
            return False
    return True
