"""A library entry's published derivative, evaluated on the check's points.

An entry may carry `derivative`, the closed form d/dx its paper gives. It is a fourth truth:
evaluated with torch in float64 on the same points, with the call's other arguments
(`swish(x, beta=1.5)`) or the defaults, and compared with the exact derivative.
"""

from __future__ import annotations

from typing import Any

import torch

from ...interpret.to_sympy import to_sympy
from ...interpret.to_torch import build
from ...language import nodes as n
from ...language.signatures import bind
from ...language.library import Library, LibraryFunction


def published_values(entry: LibraryFunction, call: n.Call, x: torch.Tensor, library: Library) -> torch.Tensor:
    """The entry's `derivative` at the float64 points `x` (its first parameter)."""
    assert entry.derivative is not None
    bound = bind(entry, call)
    env: dict[str, Any] = {entry.params[0].name: x.detach()}
    for param in entry.params[1:]:
        value = bound[param.name]
        if isinstance(value, n.EXPR_TYPES):
            value = float(to_sympy(n.Program((), value, ()), {}, library=library))
        env[param.name] = float(value)
    with torch.no_grad():
        out = build(entry.derivative, env, library=library).output
    return torch.as_tensor(out, dtype=torch.float64).expand(x.shape)
