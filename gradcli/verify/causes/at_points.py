"""Why autograd is wrong or not finite at some points: the cause, from evidence computed there.

`check` knows *where* autograd disagrees with the exact derivative. This module runs the
program again on exactly those points with every graph node recorded (graph/evidence.py:
forward values, the gradient arriving at and leaving each node, local derivatives) and names
the cause from what it sees, never from the text of the expression:

- leaked_branch: the node where the nan starts feeds a `where` branch that the condition
  did not select at those points;
- overflow: an intermediate is ±inf there, made from finite inputs (exp(710) in float64),
  or is 0 where its exact value is not and a later log / division turns that into ±inf;
- inf_minus_inf / zero_times_inf: the gradients that meet at a node are +inf and -inf, or a
  zero gradient arrives at a node whose local derivative is infinite (and the reverse);
- cancellation: the value is finite but wrong, a sum of nearly equal terms losing digits
  (or a zero made by one, then divided by);
- undefined: the exact derivative itself is undefined or infinite there: no bug.

Points are grouped per derivative into the non-finite and the finite-but-wrong ones; each
group gets one cause, read off its evidence by verify/causes/nodes.py. The analysis works on graph nodes, so any computation torch records
can be diagnosed; nodes carry the source span the builder gave them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from ...graph.evidence import Evidence, gather
from ...graph.values import all_finite
from ...exact.arbitrate import UNDEFINED, sample
from .cause import Cause
from .nodes import NodeReasoning

#: Most points of one group run again with every node recorded (they are alike by construction).
EVIDENCE_POINTS = 2_000
#: Points listed by value in a cause.
POINTS_SHOWN = 3
#: Points of a "truly undefined" group whose verdict is asked of sympy and mpmath both.
WITNESSED_POINTS = 5


def find_causes(
    program: Any, library: Any, points: Mapping[str, torch.Tensor], autograd: Mapping[Any, torch.Tensor],
    targets: Mapping[Any, Any], *, dtype: torch.dtype, rtol: float, atol: float, source: str,
    outside: torch.Tensor | None = None,
) -> list[Cause]:
    """The causes of every wrong or undefined-and-not-finite group of points.

    `program` is the elementwise body checked, `points` the flat float64 points (rounded to
    `dtype`), `autograd`, `targets` and `outside` (where the function itself is undefined)
    what `evaluate` computed on them."""
    from ...interpret.to_torch import build

    def run_on(index: torch.Tensor) -> tuple[Evidence, dict[str, torch.Tensor]]:
        leaves = {n: v[index].to(dtype).clone().requires_grad_(True) for n, v in points.items()}
        return gather(lambda: build(program, leaves, library=library).output, leaves), leaves

    largest = float(torch.finfo(dtype).max)
    found: list[Cause] = []
    for key, target in targets.items():
        name = key if isinstance(key, str) else ",".join(key)
        got = autograd[key].to(torch.float64).reshape(-1)
        bad, exact, undefined = classify(got, target, rtol=rtol, atol=atol, largest=largest, outside=outside)
        if bool(undefined.any()):
            cause, bad = witnessed_undefined(name, undefined.nonzero().flatten(), bad, exact, got, target, largest,
                                             PointWords(points), outside)
            found += [cause] if cause is not None else []
        if not bad.numel():
            continue
        nonfinite = ~torch.isfinite(got[bad])
        for group, is_nan in ((bad[nonfinite], True), (bad[~nonfinite], False)):
            if not group.numel():
                continue
            chosen = torch.tensor(sample(group.tolist(), EVIDENCE_POINTS), dtype=torch.long)
            evidence, _ = run_on(chosen)
            finder = NodeReasoning(evidence, chosen.numel(), source)
            cause = finder.nonfinite() if is_nan else finder.finite(got[chosen], [exact[i] for i in chosen.tolist()])
            cause.derivative, cause.points = name, int(group.numel())
            cause.where = _where(points, group)
            if cause.kind == "overflow" and len(points) == 1:
                (var, (low, high)), = cause.where.items()
                start = low if abs(low) < abs(high) else high
                cause.summary = cause.summary.replace(" at these points", f" at these points (from {var} = {_fmt(start)})", 1)
            cause.examples = _examples(points, chosen, got, [exact[i] for i in chosen.tolist()], dtype)
            found.append(cause)
    return found


def classify(got: torch.Tensor, target: Any, *, rtol: float, atol: float, largest: float,
             outside: torch.Tensor | None) -> tuple[torch.Tensor, dict[int, float], torch.Tensor]:
    """(indices where autograd is wrong, their exact values, mask of points where autograd is
    not finite and the exact derivative looks undefined or infinite)."""
    bad, exact = _wrong(got, target, rtol, atol, largest)
    if all_finite(got):  # the mask below needs a non-finite autograd value: none, so no pass over the points
        undefined = torch.zeros(got.shape, dtype=torch.bool)
    else:
        undefined = (target.undefined | ~torch.isfinite(target.reference)) & ~target.kink & ~torch.isfinite(got)
    undefined[bad] = False
    bad, undefined = _confirm_undefined(bad, exact, undefined, target, largest, outside)
    return bad, exact, undefined


class PointWords:
    """How the points of an elementwise check are named in a cause: `x=0`, ranges per variable."""

    def __init__(self, points: Mapping[str, torch.Tensor]) -> None:
        self.points = points

    def label(self, i: int) -> str:
        return ", ".join(f"{n}={_fmt(float(v[i]))}" for n, v in self.points.items())

    def where(self, index: torch.Tensor) -> dict[str, list[float]]:
        return _where(self.points, index)

    def example(self, i: int) -> dict[str, Any]:
        return {n: float(v[i]) for n, v in self.points.items()}


def witnessed_undefined(
    name: str, index: torch.Tensor, bad: torch.Tensor, exact: dict[int, float], got: torch.Tensor, target: Any,
    largest: float, words: Any, outside: torch.Tensor | None = None,
) -> tuple[Cause | None, torch.Tensor]:
    """The "truly undefined" cause of the points `index`, asked of sympy and mpmath both
    (exact/undefined.py) at up to WITNESSED_POINTS of them. Points both find finite move to
    `bad` (autograd is simply wrong there); where they disagree, the cause is unexplained.

    Points `outside` the domain were decided on the program as written, at 50 digits
    (domain.py): sympy's formulas are simplified ((log(x) - log(x)) is 0), so they are not
    asked there, and such points stay undefined."""
    if target.witnesses is None:  # no formula to ask: the float64 and 50-digit evidence stands
        return _undefined(name, index, got, target, words, []), bad
    inside = index if outside is None else index[~outside[index]]
    asked = sample(inside.tolist(), WITNESSED_POINTS)
    verdicts = {i: target.witnesses(i, largest) for i in asked}
    moved = [i for i, v in verdicts.items() if v.value is not None]
    if moved:
        exact.update({i: verdicts[i].value for i in moved})
        bad = torch.cat([bad, torch.tensor(moved, dtype=torch.long)]).sort().values
        index = index[~torch.isin(index, torch.tensor(moved, dtype=torch.long))]
    if not index.numel():
        return None, bad
    kept = [(i, v) for i, v in verdicts.items() if v.value is None]
    return _undefined(name, index, got, target, words, kept), bad


def _undefined(name: str, index: torch.Tensor, got: torch.Tensor, target: Any, words: Any,
               verdicts: list[tuple[int, Any]]) -> Cause:
    ref = target.reference[index]
    at = words.label(int(index[0])) + (f" and {index.numel() - 1:,} more" if index.numel() > 1 else "")
    autograd = _fmt(float(got[index[0]]))
    disagree = [(i, v) for i, v in verdicts if not v.agree]
    if disagree:
        i, v = disagree[0]
        summary = (f"autograd is {autograd} where the float64 formula is not finite (at {at}), but sympy and "
                   f"mpmath disagree at {words.label(i)}: sympy gives {v.sympy.text} ({v.sympy.state}), mpmath at "
                   f"50 digits {v.mpmath.text} ({v.mpmath.state}); the derivative is not confirmed undefined")
        cause = Cause("unexplained", name, int(index.numel()), words.where(index), summary)
    elif verdicts and all(v.sympy.state == "beyond_range" for _, v in verdicts):
        i, v = verdicts[0]
        summary = (f"the exact derivative is finite but beyond the dtype's range there (at {at}): sympy "
                   f"({v.sympy.text}) and mpmath at 50 digits ({v.mpmath.text}) agree, so no float holds it and "
                   f"autograd's {autograd} is not a bug")
        cause = Cause("undefined", name, int(index.numel()), words.where(index), summary)
    else:
        what = "infinite" if bool(torch.isinf(ref).all()) else "undefined"
        agreed = ""
        if verdicts:
            i, v = verdicts[0]
            agreed = (f"; sympy ({v.sympy.text}) and mpmath at 50 digits ({v.mpmath.text}) agree"
                      + (f", asked at {len(verdicts)} of them" if index.numel() > 1 else ""))
        if not verdicts:
            agreed = "; the function itself is undefined there, evaluated as written with 50-digit numbers"
        summary = (f"the exact derivative is itself {what} there (at {at}){agreed}: "
                   f"autograd's {autograd} is not a bug")
        cause = Cause("undefined", name, int(index.numel()), words.where(index), summary)
    witnessed = dict(verdicts)
    cause.examples = []
    for i in index[:POINTS_SHOWN].tolist():
        example = {**words.example(i), "autograd": float(got[i]),
                   "exact": "inf" if math.isinf(float(target.reference[i])) else "undefined"}
        if i in witnessed:
            example["sympy"], example["mpmath"] = witnessed[i].sympy.text, witnessed[i].mpmath.text
        cause.examples.append(example)
    return cause


def _wrong(got: torch.Tensor, target: Any, rtol: float, atol: float, largest: float) -> tuple[torch.Tensor, dict[int, float]]:
    """Indices where autograd is wrong against the exact value (50 digits where in doubt),
    as exact/compare.py decides it, and those exact values."""
    ref = target.reference
    valid = ~target.undefined & ~target.kink
    close = torch.isfinite(ref) & torch.isfinite(got) & ((got - ref).abs() <= atol + rtol * ref.abs())
    # Where the formula cancels, autograd and its float64 value may share the error
    # ((exp(x)-1)/x near 0): those points are looked up at 50 digits too, as exact/compare.py does.
    suspect = target.suspect if target.suspect is not None else torch.zeros_like(valid)
    disputed = (valid & (~close | suspect)).nonzero().flatten().tolist()
    chosen = sample(disputed)
    values = target.exact(chosen) if chosen else []
    bad, exact = [], {}
    for index, value in zip(chosen, values):
        if value is UNDEFINED or abs(value) > largest:
            continue
        g = got[index].item()
        if not (math.isfinite(g) and abs(g - value) <= atol + rtol * abs(value)):
            bad.append(index)
            exact[index] = value
    return torch.tensor(bad, dtype=torch.long), exact


def _confirm_undefined(
    bad: torch.Tensor, exact: dict[int, float], undefined: torch.Tensor, target: Any, largest: float,
    outside: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Points the float64 formula calls undefined whose 50-digit exact derivative is finite
    (log(sigmoid(x)) below -745: sigmoid underflows, the function is still defined) are wrong,
    not undefined: they move to `bad`, with their exact values."""
    # Where the function itself is outside its domain (decided in exact arithmetic by the
    # check), the derivative's simplified formula may still be finite ((x**0.5)**2 is x): those
    # points stay undefined.
    candidates = undefined & ~outside if outside is not None else undefined
    indices = sample(candidates.nonzero().flatten().tolist())
    values = target.exact(indices) if indices else []
    moved = [i for i, v in zip(indices, values) if v is not UNDEFINED and math.isfinite(v) and abs(v) <= largest]
    if not moved:
        return bad, undefined
    exact.update({i: v for i, v in zip(indices, values) if i in set(moved)})
    undefined = undefined.clone()
    undefined[torch.tensor(moved)] = False
    return torch.cat([bad, torch.tensor(moved, dtype=torch.long)]).sort().values, undefined


def _where(points: Mapping[str, torch.Tensor], index: torch.Tensor) -> dict[str, list[float]]:
    return {n: [float(v[index].min()), float(v[index].max())] for n, v in points.items()}


def _examples(points: Mapping[str, torch.Tensor], index: torch.Tensor, got: torch.Tensor, exact: list[float],
              dtype: torch.dtype) -> list[dict[str, Any]]:
    picks = sorted({0, index.numel() // 2, index.numel() - 1})[:POINTS_SHOWN]
    return [{**{n: float(v[index[p]]) for n, v in points.items()}, "autograd": float(got[index[p]]),
             "exact": exact[p]} for p in picks]


def _digits(dtype: torch.dtype) -> float:
    return -math.log10(torch.finfo(dtype).eps)


def _fmt(value: float) -> str:
    return f"{value:.6g}"

