"""Where a check looks: the points of an elementwise check when no --var is given.

A library call (`swish(x)`) is checked on its entry's domain: DEFAULT_POINTS evenly spaced
points plus 0, +-1 and its kinks when they lie inside. Anything else gets DEFAULT_POINTS
uniform draws from DRAW_RANGE plus SPECIAL points, which always include 0, +-1 and large
magnitudes (up to 1000), where overflow hides. With one variable the points are in ascending
order, so that a report's ranges ("x from 709.8 to 1000") read as intervals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import torch

from .. import limits
from ..errors import LimitError, VariableError
from ..interpret.variables import VarSpec, check_range

if TYPE_CHECKING:
    from ..language.library import LibraryFunction

#: Points drawn (or spaced over a library domain) without --var; `--points N` changes it.
DEFAULT_POINTS = 1000
#: Where the random points are drawn from.
DRAW_RANGE = (-5.0, 5.0)
#: Always checked too (without --var): zero, +-1, and large magnitudes.
SPECIAL = (0.0, 1.0, -1.0, 0.5, -0.5, 10.0, -10.0, 100.0, -100.0, 1000.0, -1000.0)


def refuse_unusable(specs: Iterable[VarSpec], dtype: torch.dtype) -> None:
    """Refuse --var values a check cannot use. Checks build their points in float64 and round
    them to `dtype`, where a value beyond its range would become inf without a word; and a
    --var with no elements leaves nothing to compare (gradcheck would pass vacuously)."""
    for spec in specs:
        check_range(spec, dtype)
        if spec.numel == 0:
            raise VariableError(
                f"--var {spec.name}={spec.text} has no elements: there is nothing to check",
                hint="give at least one value, e.g. --var 'x=linspace(-3, 3, 61)'",
            )


def check_point_total(points: int, variables: int) -> None:
    """Refuse `points` per variable beyond the per-tensor limit, or beyond the limit in all
    once every variable has its own copy (a check holds each variable's values at every point)."""
    if points > limits.MAX_ELEMENTS:
        raise LimitError(f"{points:,} points per variable; the limit is {limits.MAX_ELEMENTS:,}")
    if points * variables > limits.MAX_TOTAL_ELEMENTS:
        raise LimitError(
            f"{points:,} points for each of {variables} variables make {points * variables:,} values; "
            f"the limit is {limits.MAX_TOTAL_ELEMENTS:,} in all",
            hint="give fewer --points (or smaller --var ranges), or check fewer variables at once",
        )


@dataclass
class Points:
    """Point values per variable (float64, 1-D, all the same length) and where they came from."""

    tensors: dict[str, torch.Tensor]
    source: str


def domain_points(name: str, entry: "LibraryFunction", count: int) -> Points:
    """`count` evenly spaced points over the entry's domain, with 0, +-1 and its kinks."""
    low, high = entry.domain
    extra = [v for v in (0.0, 1.0, -1.0, *entry.kinks) if low <= v <= high]
    values = torch.cat([torch.linspace(low, high, count, dtype=torch.float64), torch.tensor(extra, dtype=torch.float64)])
    values = torch.unique(values)  # sorted, and the special points only once
    return Points({name: values}, f"{values.numel():,} points over {entry.name}'s domain [{low:g}, {high:g}]")


def drawn_points(names: Sequence[str], count: int, seed: int) -> Points:
    """`count` uniform draws per variable from DRAW_RANGE, plus the SPECIAL points."""
    generator = torch.Generator().manual_seed(seed)
    low, high = DRAW_RANGE
    special = torch.tensor(SPECIAL, dtype=torch.float64)
    tensors = {}
    if len(names) == 1:
        drawn = low + (high - low) * _sorted_uniform(count, generator)
        tensors[names[0]] = _merged(drawn, special.sort().values)
    for k, name in enumerate(names if len(names) > 1 else ()):
        drawn = low + (high - low) * torch.rand(count, generator=generator, dtype=torch.float64)
        # Each variable sees the special points in another order, so that pairs differ.
        tensors[name] = torch.cat([special.roll(k), drawn])
    total = count + len(SPECIAL)
    specials = ", ".join(f"{v:g}" for v in SPECIAL if v >= 0)
    return Points(
        tensors,
        f"{total:,} points: {count:,} uniform draws from [{low:g}, {high:g}] (seed {seed}) "
        f"and the special points {specials} (and their negatives)",
    )


def _sorted_uniform(count: int, generator: torch.Generator) -> torch.Tensor:
    """`count` uniform draws from [0, 1), in ascending order, without a sort: the partial sums
    of count+1 exponential spacings over their total are distributed exactly as the sorted
    draws are (the order statistics of the uniform distribution), in one pass where a sort of
    10^7 float64 took 0.7 s CPU here."""
    # -log(1 - U) is exponential (and finite: 1 - U lies in (0, 1]); torch's own
    # exponential_ took 0.27 s on 10^7 against this 0.2 s.
    gaps = torch.rand(count + 1, generator=generator, dtype=torch.float64).neg_().log1p_().neg_()
    sums = gaps.cumsum_(0)
    return sums[:count].div_(sums[count])


def _merged(ascending: torch.Tensor, few: torch.Tensor) -> torch.Tensor:
    """Two ascending tensors as one, for a handful of `few` values (the special points)."""
    cuts = torch.searchsorted(ascending, few).tolist()
    pieces, start = [], 0
    for cut, value in zip(cuts, few.split(1)):
        pieces += [ascending[start:cut], value]
        start = cut
    return torch.cat([*pieces, ascending[start:]])
