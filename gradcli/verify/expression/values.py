"""Where `gradcli check`'s values come from: --var, the library entry's domain, or draws.

The elementwise mode takes --var's values broadcast to one point each (or, without them, the
domain of a library call, else uniform draws plus the special points); the exact mode takes
--var's small tensors or EXACT_DEFAULT. Either way the values are finite and floating (an
integer variable has no derivative to compare), only the variables the output uses are
kept, and `points_source` says where each came from.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from ...interpret.variables import VarSpec, default_spec, make_leaves
from ...errors import ShapeError, UsageError, VariableError
from ...exact.plan import Plan
from ...exact.points import DEFAULT_POINTS, SPECIAL, Points, check_point_total, domain_points, drawn_points
from .result import CheckResult

#: Default values of variables without --var in the exact (small tensor) mode.
EXACT_DEFAULT = "randn(4)"


def refuse_integers(specs: Mapping[str, VarSpec], used: Sequence[str]) -> None:
    """Refuse integer variables (randint): they have no gradient to compare."""
    integers = [spec.name for spec in specs.values() if spec.integer and spec.name in used]
    if not integers:
        return
    listed = ", ".join(integers)
    if len(integers) == len(used):
        raise UsageError(
            f"nothing to check: {listed} {'holds' if len(integers) == 1 else 'hold'} integers (randint), "
            "data without a gradient, and the output uses no other variable",
            hint="give float values to check a derivative, e.g. --var 'x=randn(4)'; "
            "gradcli trace shows how integer data flows",
        )
    raise UsageError(
        f"check compares the derivative in every variable, and {listed} "
        f"{'holds' if len(integers) == 1 else 'hold'} integers (randint): data with no derivative to compare",
        hint="give float values to check that variable too (e.g. uniform(0, 10, ...)), "
        "or use gradcli trace, which keeps integer data out of the gradients",
    )


def keep_used(leaves: Any, names: Sequence[str]) -> None:
    """Keep the leaves of `names` only (variables the output uses)."""
    for table in (leaves.tensors, leaves.specs):
        for name in [k for k in table if k not in names]:
            del table[name]


def elementwise_points(
    names: Sequence[str], every_variable: Sequence[str], specs: Mapping[str, VarSpec], plan: Plan, count: int | None,
    seed: int, result: CheckResult,
) -> dict[str, torch.Tensor]:
    """The elementwise mode's points, one value per variable each: --var's broadcast, else the
    library entry's domain or `count` draws, plus the special points."""
    if specs:
        leaves = finite_only(make_leaves)(every_variable, specs, dtype="float64", seed=seed,
                                          default=lambda n, i: default_spec(i))
        keep_used(leaves, names)
        if count is not None:
            result.notes.append("--points is ignored: --var gives the values")
        try:
            shape = torch.broadcast_shapes(*(t.shape for t in leaves.tensors.values()))
        except RuntimeError:  # each point takes one value of every variable: the shapes must broadcast
            shapes = ", ".join(f"{n} {list(t.shape)}" for n, t in leaves.tensors.items())
            raise ShapeError(f"check takes one value of every variable per point, and the --var shapes cannot be "
                             f"broadcast together: {shapes}", hint="give shapes that broadcast (trailing sizes equal "
                             "or 1), e.g. the same shape for every variable") from None
        check_point_total(shape.numel(), len(names))  # before broadcasting copies them
        values = torch.broadcast_tensors(*(t.detach() for t in leaves.tensors.values()))
        result.points_source = describe_leaves(leaves)
        return {name: v.reshape(-1).clone() for name, v in zip(names, values)}
    count = count or DEFAULT_POINTS
    check_point_total(count + len(SPECIAL), len(names))  # the special points come on top
    if plan.entry is not None:
        found: Points = domain_points(names[0], plan.entry, count)
    else:
        found = drawn_points(names, count, seed)
    result.points_source = found.source
    return found.tensors


def exact_values(
    names: Sequence[str], every_variable: Sequence[str], specs: Mapping[str, VarSpec], seed: int, result: CheckResult,
) -> dict[str, torch.Tensor]:
    """The exact mode's small tensors: --var's, else EXACT_DEFAULT, for the variables used."""
    leaves = finite_only(make_leaves)(every_variable, specs, dtype="float64", device="cpu", seed=seed,
                                      default=lambda name, index: EXACT_DEFAULT)
    keep_used(leaves, names)
    result.points_source = describe_leaves(leaves)
    return leaves.tensors


def finite_only(make: Any) -> Any:
    """`make` (make_leaves), refusing nan/inf values: no derivative is compared at such a point."""

    def checked(*args: Any, **kwargs: Any) -> Any:
        leaves = make(*args, **kwargs)
        for name, tensor in leaves.tensors.items():
            if not bool(torch.isfinite(tensor).all()):
                raise VariableError(f"--var {name} holds nan or inf, where no derivative can be compared",
                                    hint="gradcli trace ... --flow shows where a nan or inf goes")
        return leaves

    return checked


def describe_leaves(leaves: Any) -> str:
    """`points_source`: each variable's values and whether --var or the default gave them."""
    parts = []
    for name, spec in leaves.specs.items():
        given = "default" if name in leaves.defaulted else "--var"
        parts.append(f"{name}={spec.text} ({given})")
    return ", ".join(parts)
