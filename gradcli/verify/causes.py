"""Why autograd is wrong or not finite at some points: the cause, from evidence computed there.

`check` knows *where* autograd disagrees with the exact derivative. This module runs the
program again on exactly those points with every graph node recorded (inspect/evidence.py:
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
group gets one cause, read off its evidence by verify/node_causes.py. The analysis works on graph nodes, so any computation torch records
can be diagnosed; nodes carry the source span the builder gave them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from ..inspect.evidence import Evidence, gather
from .arbitrate import UNDEFINED, sample
from .cause import Cause
from .node_causes import NodeReasoning

#: Most points of one group run again with every node recorded (they are alike by construction).
EVIDENCE_POINTS = 2_000
#: Points listed by value in a cause.
POINTS_SHOWN = 3


def find_causes(
    program: Any, library: Any, points: Mapping[str, torch.Tensor], autograd: Mapping[Any, torch.Tensor],
    targets: Mapping[Any, Any], *, dtype: torch.dtype, rtol: float, atol: float, source: str,
    outside: torch.Tensor | None = None,
) -> list[Cause]:
    """The causes of every wrong or undefined-and-not-finite group of points.

    `program` is the elementwise body checked, `points` the flat float64 points (rounded to
    `dtype`), `autograd`, `targets` and `outside` (where the function itself is undefined)
    what `evaluate` computed on them."""
    from ..build.to_torch import build

    def run_on(index: torch.Tensor) -> tuple[Evidence, dict[str, torch.Tensor]]:
        leaves = {n: v[index].to(dtype).clone().requires_grad_(True) for n, v in points.items()}
        return gather(lambda: build(program, leaves, library=library).output, leaves), leaves

    largest = float(torch.finfo(dtype).max)
    found: list[Cause] = []
    for key, target in targets.items():
        name = key if isinstance(key, str) else ",".join(key)
        got = autograd[key].to(torch.float64).reshape(-1)
        bad, exact = _wrong(got, target, rtol, atol, largest)
        undefined = (target.undefined | ~torch.isfinite(target.reference)) & ~target.kink & ~torch.isfinite(got)
        undefined[bad] = False
        bad, undefined = _confirm_undefined(bad, exact, undefined, target, largest, outside)
        if bool(undefined.any()):
            found.append(_undefined(name, undefined.nonzero().flatten(), points, got, target))
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


def _wrong(got: torch.Tensor, target: Any, rtol: float, atol: float, largest: float) -> tuple[torch.Tensor, dict[int, float]]:
    """Indices where autograd is wrong against the exact value (50 digits where in doubt),
    as compare.py decides it, and those exact values."""
    ref = target.reference
    valid = ~target.undefined & ~target.kink
    close = torch.isfinite(ref) & torch.isfinite(got) & ((got - ref).abs() <= atol + rtol * ref.abs())
    disputed = (valid & ~close).nonzero().flatten().tolist()
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


def _undefined(name: str, index: torch.Tensor, points: Mapping[str, torch.Tensor], got: torch.Tensor, target: Any) -> Cause:
    ref = target.reference[index]
    infinite = bool(torch.isinf(ref).all())
    what = "infinite" if infinite else "undefined"
    at = ", ".join(f"{n}={_fmt(float(v[index[0]]))}" for n, v in points.items())
    summary = (f"the exact derivative is itself {what} there (at {at}"
               + (f" and {index.numel() - 1:,} more" if index.numel() > 1 else "")
               + f"): autograd's {_fmt(float(got[index[0]]))} is not a bug")
    cause = Cause("undefined", name, int(index.numel()), _where(points, index), summary)
    cause.examples = [{**{n: float(v[i]) for n, v in points.items()}, "autograd": float(got[i]),
                       "exact": "inf" if math.isinf(float(target.reference[i])) else "undefined"}
                      for i in index[:POINTS_SHOWN].tolist()]
    return cause


def _digits(dtype: torch.dtype) -> float:
    return -math.log10(torch.finfo(dtype).eps)


def _fmt(value: float) -> str:
    return f"{value:.6g}"

