"""Points where finite differences mislead, found with torch alone.

At a branch boundary of where(...) (its comparison's two sides equal), a tie of maximum or
minimum, a bound of clamp or an operation's kink (abs and relu at 0) the function has no
derivative, or a different one on each side: gradcheck's finite differences straddle the
point and report a mismatch that says nothing about autograd. The symbolic side finds such
points exactly (regions.py). When it was skipped (sympy timed out, or cannot translate the
program), this finds them instead: the program is built once more, in float64 without a
graph, with an observer that measures at each such operation how far every point is from
the boundary, relative to the size of the values (NEAR_KINK, as regions.py uses).

It is conservative: torch evaluates both branches of a where, so a kink inside the branch
not taken counts too. A point it marks is only kept out of finite differences.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..interpret.to_torch import build
from ..language.nodes import COMPARISONS
from ..language.ops import OPS
from .regions import near_each_other


class _Margins:
    """The observer: for each point, whether some boundary is within NEAR_KINK of it (or,
    with another `gap`, any other measure of a value against its boundary).

    What is a boundary is the op row's knowledge (`kinks`, `meets`); a comparison's boundary
    is where its two sides are equal."""

    def __init__(self, gap: Any = None) -> None:
        self.near: list[torch.Tensor] = []
        self.measure = near_each_other if gap is None else gap

    def __call__(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if name in COMPARISONS:
            self._meet(args[0], args[1])
            return
        op = OPS.get(name)
        if op is None or not args:
            return
        bound = {**dict(zip((p.name for p in op.params), args)), **kwargs}
        for param in op.meets:
            self._meet(args[0], bound.get(param))
        for kink in op.kinks:
            self._gap(args[0], kink)

    def _meet(self, a: Any, b: Any) -> None:
        if b is not a:  # h <= h, maximum(x, x): a value against itself has no boundary
            self._gap(a, b)

    def _gap(self, a: Any, b: Any) -> None:
        if b is None or not (isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor)):
            return
        self.near.append(self.measure(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)))


def near_boundaries(program: Any, library: Any, points: Mapping[str, torch.Tensor], size: int) -> torch.Tensor:
    """A mask over `size` points (elementwise mode: each variable a flat tensor of `size`
    values): True where a point is at or next to a boundary."""
    mask = torch.zeros(size, dtype=torch.bool)
    for near in _measure(program, library, points):
        if near.numel() == size:
            mask |= near.reshape(-1)
        elif near.numel() == 1:
            mask |= bool(near)
        elif bool(near.any()):  # measured on a shape not of the points: say all of them
            mask[:] = True
    return mask


def any_near_boundary(program: Any, library: Any, values: Mapping[str, torch.Tensor]) -> bool:
    """Whether some element of `values` (tensors of any shape) is at or next to a boundary."""
    return any(bool(near.any()) for near in _measure(program, library, values))


def _measure(program: Any, library: Any, values: Mapping[str, torch.Tensor], gap: Any = None) -> list[torch.Tensor]:
    margins = _Margins(gap)
    leaves = {name: v.detach().to(torch.float64) for name, v in values.items()}
    with torch.no_grad():
        build(program, leaves, library=library, observe=margins)
    return margins.near
