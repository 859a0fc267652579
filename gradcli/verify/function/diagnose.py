"""Naming the likely cause of a wrong backward, only from evidence computed here.

Each first-order rule is a pattern the compared entries of the Jacobian blocks (your
backward's against the expected; entries at a kink are not compared) show outright: the
blocks of two inputs swapped, a constant factor (-1: a flipped sign), wrong on one side of 0
only, all zeros. At second order a cause needs more than the shape of the mismatch (an
@once_differentiable backward never gets there: it is not twice differentiable by design, and
verify/function/check.py does not check it at order 2): a saved intermediate when forward saved a tensor computed from the input AND the same backward,
run by hand with that tensor differentiable (verify/function/replay.py), gets the second derivatives right
(NOTES.md: Swish saving sigmoid(x)); a non-differentiable backward when, run by hand, its
result has no graph. Otherwise no cause is named, and `what_was_seen` says what was seen:
where a derivative is not finite, for which input element, at which order.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..causes.cause import Cause, CauseKind
from ..finite_differences.jacobian import InputCheck

_CLOSE = dict(rtol=1e-3, atol=1e-5)


def first_order_causes(checks: Sequence[InputCheck], values: dict[str, torch.Tensor]) -> list[Cause]:
    causes: list[Cause] = []
    failing = [c for c in checks if not c.ok]
    swapped = _swapped(checks)
    if swapped:
        a, b = swapped
        causes.append(_cause(
            "swapped_gradients", [c for c in checks if c.name in swapped],
            f"backward returns the gradients in the wrong order: what it returns for {a} is the true "
            f"gradient for {b}, and the other way round (return them in forward's input order)",
        ))
    for c in failing:
        if swapped and c.name in swapped:
            continue
        for kind, found in (("zero_gradient", _zero(c)), ("scaled_gradient", _scaled(c)),
                            ("one_sided", _one_side(c, values.get(c.name)))):
            if found:
                causes.append(_cause(kind, [c], found))  # type: ignore[arg-type]
                break
    return causes


def _cause(kind: CauseKind, checks: Sequence[InputCheck], summary: str) -> Cause:
    """A Function's cause: the input blocks it concerns and their wrong entries."""
    return Cause(kind, ",".join(c.name for c in checks), sum(c.count for c in checks), {}, summary)


def second_order_causes(
    checks: Sequence[InputCheck], *, first_ok: bool,
    intermediates: Sequence[str] = (), replayed: Sequence[InputCheck] | None = None,
    replay_differentiable: bool = True,
) -> list[Cause]:
    """Causes of a wrong double backward, each stated only on evidence computed here:
    `replayed` is the same comparison with forward and backward run by hand (verify/function/replay.py),
    where the saved `intermediates` keep their dependence on the input."""
    failing = [c for c in checks if not c.ok]
    if not failing or not first_ok:
        return []
    found = _second_order_summary(failing, intermediates, replayed, replay_differentiable)
    return [] if found is None else [_cause(found[0], failing, found[1])]


def _second_order_summary(
    failing: Sequence[InputCheck], intermediates: Sequence[str], replayed: Sequence[InputCheck] | None,
    replay_differentiable: bool,
) -> tuple[CauseKind, str] | None:
    zeros = all(bool((_compared_values(c.got, c) == 0).all()) for c in failing)
    if intermediates and replayed is not None and replayed and all(c.ok for c in replayed):
        what = ", ".join(intermediates)
        return ("saved_intermediate",
                f"right at first order but wrong at second: forward saved a tensor it computed ({what}) and "
                "backward uses it; to double backward it is a constant, so the second derivative misses how it "
                "depends on the input (shown: with it recomputed from the input, the same backward's second "
                "derivatives agree). Save the inputs and recompute it in backward")
    if zeros and not replay_differentiable:
        return ("not_differentiable",
                "double backward gives zeros: backward's result does not depend differentiably on its inputs "
                "even when run by hand with a graph (it is computed under no_grad, or through .detach(), "
                ".item() or numpy)")
    return None


def what_was_seen(
    checks: Sequence[InputCheck], order: int, first: Sequence[InputCheck], origin: str | None = None
) -> list[str]:
    """Where the derivatives of `order` are not finite, said as seen: how many entries, the
    first input element and its value, whether the first derivatives are finite there, and
    the node (and line of backward) the first nan came out of (origin.py), when found."""
    seen = []
    for c in checks:
        bad = ~torch.isfinite(c.got)
        if not bool(bad.any()):
            continue
        where = next((m for m in c.mismatches if not math.isfinite(m.got)), None)
        at = f", first at {where.element} (= {where.at:.6g}) -> {where.output}" if where else ""
        what = "double backward" if order == 2 else "backward"
        kinds = sorted({"nan" if math.isnan(v) else "inf" for v in c.got[bad].tolist()})
        line = f"{what} gives {' and '.join(kinds)} at {int(bad.sum()):,} of {c.got.numel():,} entries for {c.name} (order {order}){at}"
        if order == 2:
            finite = all(bool(torch.isfinite(f.got).all()) for f in first)
            line += "; the first derivatives are finite at these inputs" if finite else ""
        line += f"; the first nan comes out of {origin}" if origin else ""
        seen.append(line)
    return seen


def _compared_values(values: torch.Tensor, c: InputCheck) -> torch.Tensor:
    """The entries of a block that were compared (those at a kink are not)."""
    return values if c.apart is None else values[~c.apart]


def _swapped(checks: Sequence[InputCheck]) -> tuple[str, str] | None:
    for i, a in enumerate(checks):
        for b in checks[i + 1:]:
            if a.ok and b.ok or a.got.shape != b.got.shape:
                continue
            if torch.allclose(a.got, b.expected, **_CLOSE) and torch.allclose(b.got, a.expected, **_CLOSE):
                return a.name, b.name
    return None


def _zero(c: InputCheck) -> str | None:
    if bool((_compared_values(c.got, c) == 0).all()) and bool((_compared_values(c.expected, c) != 0).any()):
        return f"backward returns zeros (or None) for {c.name}"
    return None


def _scaled(c: InputCheck) -> str | None:
    compared = torch.ones_like(c.got, dtype=torch.bool) if c.apart is None else ~c.apart
    mask = (c.expected.abs() > 1e-6) & compared
    if not bool(mask.any()) or not bool(torch.isfinite(c.got[compared]).all()):
        return None
    ratio = c.got[mask] / c.expected[mask]
    factor = float(ratio.median())
    if not torch.allclose(ratio, torch.full_like(ratio, factor), rtol=1e-4, atol=1e-6):
        return None
    if not torch.allclose(c.got[~mask & compared], torch.zeros(()).double(), atol=1e-5):
        return None
    flipped = abs(factor + 1) < 1e-4
    found = (f"the sign is flipped: backward returns minus the true gradient for {c.name}" if flipped else
             f"backward's gradient for {c.name} is {factor:.4g} times the true one: a constant factor is wrong")
    rows, cols = c.expected.shape
    if rows == cols and torch.allclose(c.expected, torch.eye(rows, dtype=c.expected.dtype), atol=1e-6):
        # Forward passes x through unchanged: a scaled backward is a gradient reversal or
        # scaling layer, wrong only if it was not meant.
        declared = "-grad_output" if flipped else f"{factor:.4g}*grad_output"
        found += (f" (forward passes {c.name} through; if that is meant, as in a gradient reversal layer, "
                  f"declare it: --expect-grad '{c.name}={declared}')")
    return found


def _one_side(c: InputCheck, values: torch.Tensor | None) -> str | None:
    if values is None or c.got.shape[1] != values.numel():
        return None
    x = values.detach().reshape(-1)
    wrong = ~((c.got - c.expected).abs() <= 1e-5 + 1e-3 * c.expected.abs())
    bad = (wrong if c.apart is None else wrong & ~c.apart).any(dim=0)
    if not bool(bad.any()):
        return None
    for strict, sign in ((">", 1), ("<", -1)):
        # 0 belongs to the side whose branch backward took there, when it is wrong there too
        at_zero = bool((bad & (x == 0)).any())
        on_side = (sign * x > 0) | ((x == 0) & at_zero)
        # Evidence of a wrong branch: every compared element of the side is wrong, none elsewhere.
        compared = ~_kink_columns(c)
        if (bool((bad == on_side)[compared].all()) and bool((bad & on_side).any())
                and bool((~bad & (sign * x < 0)).any())):
            side = f"{c.name} {strict}{'=' if at_zero else ''} 0"
            other = f"{c.name} {'<' if sign > 0 else '>'} 0"
            return f"wrong only where {side} (right where {other}): check the branch of backward for {side}"
    return None


def _kink_columns(c: InputCheck) -> torch.Tensor:
    """Input elements whose every entry is at a kink (none of theirs was compared)."""
    if c.apart is None:
        return torch.zeros(c.got.shape[1], dtype=torch.bool)
    wrong = c.wrong()
    return c.apart.any(dim=0) & ~wrong.any(dim=0)


def is_once_differentiable(cls: type) -> bool:
    backward = getattr(cls, "backward", None)
    code = getattr(backward, "__code__", None)
    return bool(
        hasattr(backward, "__wrapped__") and code is not None and code.co_filename.replace("\\", "/").endswith("torch/autograd/function.py")
    )
