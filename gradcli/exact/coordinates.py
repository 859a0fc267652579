"""Which input elements of a coupled program sit at a kink, one element at a time.

In a reduction or softmax over where(...), a kink at one element used to set the whole call
aside: every element was kept out of gradcheck, so nans in the other elements went
unnoticed. A kink is a property of an input coordinate, not of the call: finite
differences along element j mislead only if moving element j alone changes a branch. So
each element is moved by +-STEP on its own, and the side every comparison, tie, clamp bound
and operation kink takes (the sign of a - b, element by element, recorded by the
boundaries.py observer) is compared with the side it takes unmoved. Elements whose move
changes a side are held fixed in gradcheck (`held_fixed`); the others are checked.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from ..language.nodes import COMPARISONS
from .boundaries import _measure

#: How far each element is moved: ten times gradcheck's step of 1e-6.
STEP = 1e-5
#: Most elements moved one at a time (two forward passes each).
MAX_ELEMENTS = 1_000


def _sides(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.sign(a - b)


def at_kink(program: Any, library: Any, values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """Per variable, a bool tensor of its shape: True where moving that element alone by
    +-STEP changes a branch. None past MAX_ELEMENTS elements (not decided)."""
    if sum(v.numel() for v in values.values()) > MAX_ELEMENTS:
        return None
    base_values = {n: v.detach().to(torch.float64) for n, v in values.items()}
    base = _measure(program, library, base_values, _sides)
    found = {}
    for name, value in base_values.items():
        flat = value.reshape(-1)
        held = torch.zeros(flat.numel(), dtype=torch.bool)
        for j in range(flat.numel()):
            for sign in (1, -1):
                moved = flat.clone()
                moved[j] += sign * STEP * max(1.0, abs(flat[j].item()))
                sides = _measure(program, library, {**base_values, name: moved.reshape(value.shape)}, _sides)
                if len(sides) != len(base) or any(not torch.equal(s, b) for s, b in zip(sides, base)):
                    held[j] = True
                    break
        found[name] = held.reshape(value.shape)
    return found


def held_fixed(
    fn: Callable[..., Any], values: list[torch.Tensor], held: list[torch.Tensor]
) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """`fn` as a function of the elements not held (those held keep their values), and
    those elements: gradcheck then perturbs only them. A variable with every element held
    is a constant."""
    free = [~h.reshape(-1) for h in held]

    def partial(*xs: torch.Tensor) -> Any:
        given = iter(xs)
        full = []
        for value, keep in zip(values, free):
            if bool(keep.any()):
                flat = value.detach().to(torch.float64).reshape(-1)
                flat = flat.index_put((keep.nonzero().flatten(),), next(given))
                full.append(flat.reshape(value.shape))
            else:
                full.append(value.detach().to(torch.float64))
        return fn(*full)

    inputs = [value.detach().to(torch.float64).reshape(-1)[keep] for value, keep in zip(values, free) if bool(keep.any())]
    return partial, inputs


def where_ties(program: Any, library: Any, points: Mapping[str, torch.Tensor], size: int) -> torch.Tensor:
    """Points (elementwise mode, P of them) where a where(...) condition compares two equal
    values, found with torch on the program as written: sympy may rewrite the boundary away
    (where(x != 0, x/x, 1) becomes the constant 1), yet autograd's value there comes from
    both branches (0 * nan in the unselected one), so such a point is a boundary."""
    from ..interpret.to_torch import build

    found = torch.zeros(size, dtype=torch.bool)

    def observe(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if name not in COMPARISONS or len(args) < 2 or args[1] is args[0]:
            return
        a, b = (torch.as_tensor(v, dtype=torch.float64) for v in args[:2])
        tie = a == b
        if tie.numel() == size:
            found.__ior__(tie.reshape(-1))
        elif tie.numel() == 1:
            found.__ior__(bool(tie))
        elif bool(tie.any()):
            found[:] = True

    with torch.no_grad():
        build(program, {n: v.detach().to(torch.float64) for n, v in points.items()}, library=library, observe=observe)
    return found
