"""When gradcheck disagrees with autograd: which of the two is wrong, decided exactly.

gradcheck's central differences (a step of 1e-6 in float64) are not a truth. At x = 1e20 the
step rounds back to x; next to a pole (1/x at linspace(-1, 1, 201)'s ~1e-17 point) or on a
fast oscillation (sin(x**2) at 5e4) the derivative changes within the step; near a domain
edge the step leaves the domain; a forward constant in float64 (x + 1e20) shows no change at
all. A failed gradcheck is therefore not the verdict where the exact derivative is known:
the same central differences are taken element by element here (no Jacobian, so memory
stays linear), the elements where they disagree with autograd are looked up at 50 digits,
and where autograd agrees with the exact value the finite differences are reported
unreliable there, with the reason. A gradient that only finite differences catch (the exact
value says autograd is wrong too, or no exact value is known) still fails.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ...exact.arbitrate import ARBITRATE_LIMIT, UNDEFINED, sample

#: gradcheck's default step and tolerances (|numerical - analytical| <= ATOL + RTOL*|numerical|).
EPS, ATOL, RTOL = 1e-6, 1e-5, 1e-3

#: Why finite differences failed at an element, from the values that went into them.
STEP_ROUNDED = "the step of 1e-06 is lost to rounding at this magnitude of x"
LEAVES_DOMAIN = "a step lands outside the domain or on a pole (the function is not finite there)"
FLAT_FORWARD = "the forward does not change over the step in float64"
FORWARD_ROUNDING = "the forward's float64 rounding, divided by the step, exceeds the tolerance"
CURVATURE = "the derivative changes within the step (near a pole, an edge or a fast oscillation)"


@dataclass
class Differences:
    """Central differences of one quantity, element by element, and what went into them."""

    at: torch.Tensor  # the input element's value (P,)
    plus: torch.Tensor  # the output at x + EPS (P,)
    minus: torch.Tensor  # the output at x - EPS (P,)
    value: torch.Tensor  # (plus - minus) / (2 EPS), times the caller's scale (P,)


@dataclass
class Arbitration:
    """The outcome over the elements where finite differences and autograd disagree."""

    disagreeing: int = 0
    unreliable: dict[int, str] = field(default_factory=dict)  # position (into Differences) -> why
    wrong_at: list[int] = field(default_factory=list)  # autograd disagrees with the exact value too
    undecided: int = 0  # no exact value (not looked up, or undefined there)

    @property
    def explained(self) -> bool:
        """Every disagreement is finite differences' fault."""
        return self.disagreeing > 0 and not self.wrong_at and not self.undecided


def unreliable_sentence(points: int, reasons: dict[str, int], what: str = "") -> str:
    """`points` set aside, and how many of them each reason accounts for (most first)."""
    told = "; ".join(f"{reason}: {n:,}" for reason, n in Counter(reasons).most_common())
    return (f"finite differences{what} are unreliable at {points:,} point{'s' if points != 1 else ''} "
            f"({told}), where autograd agrees with the 50-digit derivative")


def elementwise_differences(
    fn: Callable[[dict[str, torch.Tensor]], Any], values: dict[str, torch.Tensor], name: str, scale: float = 1.0
) -> Differences:
    """Central differences of an elementwise `fn` in `name` at every point at once: point i's
    output depends on point i's inputs alone, so one step of the whole tensor gives them all."""
    return elementwise_differences_each(lambda v: {None: fn(v)}, values, name, scale)[None]


def elementwise_differences_each(
    fn: Callable[[dict[str, torch.Tensor]], dict[Any, Any]], values: dict[str, torch.Tensor], name: str,
    scale: float = 1.0,
) -> dict[Any, Differences]:
    """elementwise_differences of each output of `fn` (a dict), from one call of `fn` on each
    side of the step: at order 2, every first derivative's differences in `name` come from the
    same two backward passes."""
    x = values[name]
    size = x.numel()
    plus, minus = fn({**values, name: x + EPS}), fn({**values, name: x - EPS})
    found = {}
    for key in plus:
        up, down = _flat(plus[key], size), _flat(minus[key], size)
        found[key] = Differences(x, up, down, (up - down) / (2 * EPS) * scale)
    return found


def projected_differences(
    fn: Callable[[dict[str, torch.Tensor]], Any], values: dict[str, torch.Tensor], name: str, weights: torch.Tensor
) -> Differences:
    """Central differences of L = sum(weights * fn) in each element of `name` (a small tensor)."""
    flat = values[name].reshape(-1)
    plus, minus = torch.empty(flat.numel(), dtype=torch.float64), torch.empty(flat.numel(), dtype=torch.float64)
    with torch.no_grad():
        for j in range(flat.numel()):
            for sign, out in ((1, plus), (-1, minus)):
                moved = flat.clone()
                moved[j] += sign * EPS
                y = torch.as_tensor(fn({**values, name: moved.reshape(values[name].shape)}), dtype=torch.float64)
                out[j] = (y.reshape(-1) * weights.reshape(-1)).sum()
    return Differences(flat, plus, minus, (plus - minus) / (2 * EPS))


def _flat(out: Any, size: int) -> torch.Tensor:
    out = torch.as_tensor(out).detach().to(torch.float64)
    return out.expand(size).reshape(-1) if out.numel() == 1 else out.reshape(-1)


def disagreeing(numerical: torch.Tensor, analytical: torch.Tensor) -> torch.Tensor:
    """Where gradcheck's test fails for an element: nan anywhere fails, and an infinity
    passes only against the same infinity (|inf - a| <= inf would let it through)."""
    close = ((analytical - numerical).abs() <= ATOL + RTOL * numerical.abs()) & torch.isfinite(numerical)
    return ~(close | (analytical == numerical))


def arbitrate(
    diffs: Differences, autograd: torch.Tensor, exact: Callable[[list[int]], Sequence[float | None]],
    *, atol: float, rtol: float, positions: torch.Tensor | None = None,
) -> Arbitration:
    """Look up the exact derivative where `diffs` and `autograd` (P,) disagree. `exact` takes
    positions (into the P elements) and gives 50-digit values; `atol`/`rtol` are the
    check's own tolerances for autograd against the exact value. `positions` limits the
    search (elements already set aside elsewhere are not looked at)."""
    auto = autograd.detach().to(torch.float64).reshape(-1)
    bad = disagreeing(diffs.value, auto)
    if positions is not None:
        keep = torch.zeros_like(bad)
        keep[positions] = True
        bad &= keep
    found = bad.nonzero().flatten().tolist()
    result = Arbitration(disagreeing=len(found))
    chosen = sample(found, ARBITRATE_LIMIT)
    result.undecided = len(found) - len(chosen)
    for position, value in zip(chosen, exact(chosen) if chosen else []):
        got = auto[position].item()
        if value is UNDEFINED or not math.isfinite(value):
            result.undecided += 1
        elif math.isfinite(got) and abs(got - value) <= atol + rtol * abs(value):
            result.unreliable[position] = reason(diffs, position, value)
        else:
            result.wrong_at.append(position)
    return result


def reason(diffs: Differences, position: int, exact: float) -> str:
    """Why the central difference at `position` misleads, read off what went into it."""
    x = diffs.at[position].item()
    plus, minus = diffs.plus[position].item(), diffs.minus[position].item()
    if abs(((x + EPS) - (x - EPS)) - 2 * EPS) > 1e-3 * 2 * EPS:
        return STEP_ROUNDED
    if not (math.isfinite(plus) and math.isfinite(minus)):
        return LEAVES_DOMAIN
    if plus == minus and exact != 0:
        return FLAT_FORWARD
    spacing = math.ulp(max(abs(plus), abs(minus)))
    if spacing / (2 * EPS) > 0.1 * (ATOL + RTOL * abs(exact)):
        return FORWARD_ROUNDING
    return CURVATURE
