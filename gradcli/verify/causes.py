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
group gets one cause. The analysis works on graph nodes, so any computation torch records
can be diagnosed; nodes carry the source span the builder gave them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import torch

from ..inspect.evidence import Evidence, NodeEvidence, gather
from .arbitrate import UNDEFINED, sample

CauseKind = Literal[
    "leaked_branch", "overflow", "inf_minus_inf", "zero_times_inf", "cancellation", "undefined", "unexplained"
]
#: Most points of one group run again with every node recorded (they are alike by construction).
EVIDENCE_POINTS = 2_000
#: Points listed by value in a cause.
POINTS_SHOWN = 3


@dataclass
class Cause:
    """One reason, for one group of points of one derivative."""

    kind: CauseKind
    derivative: str  # "x", or "x,x" for a second derivative
    points: int  # how many points of the check it covers
    where: dict[str, list[float]]  # variable -> [lowest, highest] over those points
    summary: str  # one sentence, from evidence
    node: str | None = None  # the graph node it points at (grad_fn name)
    source: str | None = None  # the part of the expression that node computes
    factors: list[dict[str, Any]] = field(default_factory=list)  # 0·inf, inf−inf: the two factors
    examples: list[dict[str, Any]] = field(default_factory=list)  # a few points with their values
    rewrite: dict[str, Any] | None = None  # filled by verify/fixes.py when a rewrite is proven

    @property
    def is_bug(self) -> bool:
        return self.kind != "undefined"

    def as_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items()}
        data["is_bug"] = self.is_bug
        return data


def find_causes(
    program: Any, library: Any, points: Mapping[str, torch.Tensor], autograd: Mapping[Any, torch.Tensor],
    targets: Mapping[Any, Any], *, dtype: torch.dtype, rtol: float, atol: float, source: str,
) -> list[Cause]:
    """The causes of every wrong or undefined-and-not-finite group of points.

    `program` is the elementwise body checked, `points` the flat float64 points (rounded to
    `dtype`), `autograd` and `targets` what `evaluate` computed on them."""
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
        bad, undefined = _confirm_undefined(bad, exact, undefined, target, largest)
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
            finder = _Finder(evidence, chosen.numel(), source)
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
    bad: torch.Tensor, exact: dict[int, float], undefined: torch.Tensor, target: Any, largest: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Points the float64 formula calls undefined whose 50-digit exact derivative is finite
    (log(sigmoid(x)) below -745: sigmoid underflows, the function is still defined) are wrong,
    not undefined: they move to `bad`, with their exact values."""
    indices = sample(undefined.nonzero().flatten().tolist())
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
    picks = sorted(set([0, index.numel() // 2, index.numel() - 1]))[:POINTS_SHOWN]
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


class _Finder:
    """The reasoning over one group's evidence (all tensors hold the group's points)."""

    def __init__(self, evidence: Evidence, size: int, source: str) -> None:
        self.evidence = evidence
        self.size = size
        self.source = source

    # -- per-point views --------------------------------------------------------------------
    def at(self, value: Any) -> torch.Tensor | None:
        """`value` as one number per point (a scalar broadcast), or None if not a tensor."""
        if not isinstance(value, torch.Tensor) or value.is_complex():
            return None
        value = value.detach().to(torch.float64) if value.dtype != torch.bool else value.detach()
        if value.numel() == self.size:
            return value.reshape(-1)
        if value.numel() == 1:
            return value.reshape(1).expand(self.size)
        return None

    def text(self, evidence: NodeEvidence) -> str | None:
        span = evidence.span
        if span is None or span.line != span.end_line:
            return None
        lines = self.source.splitlines() or [""]
        return lines[span.line - 1][span.col:span.end_col] if span.line <= len(lines) else None

    def first_inf(self) -> NodeEvidence | None:
        """The first node (forward order) whose value is ±inf at most points from finite inputs."""
        for node in self.evidence.nodes:
            out = self.at(node.output)
            if out is None:
                continue
            inputs = [self.at(i) for i in node.inputs]
            made = torch.isinf(out)
            for i in inputs:
                if i is not None and i.dtype != torch.bool:
                    made &= torch.isfinite(i)
            if bool(made.any()):
                return node
        return None

    # -- the causes -------------------------------------------------------------------------
    def nonfinite(self) -> Cause:
        origin = self.origin()
        leaked = self.leaked(origin)
        if leaked is not None:
            return leaked
        inf = self.first_inf()
        if inf is not None:
            return self.from_inf(inf, origin)
        crossing = self.inf_minus_inf()
        if crossing is not None:
            return crossing
        if origin is not None:
            product = self.zero_times_inf(origin)
            if product is not None:
                return product
            return Cause("unexplained", "", 0, {}, f"the first non-finite gradient leaves {origin.name}"
                         f"{self._of(origin)}, with no infinite value, leaked branch or 0·inf to explain it",
                         node=origin.name, source=self.text(origin))
        return Cause("unexplained", "", 0, {}, "no node was seen to make the non-finite gradient")

    def origin(self) -> NodeEvidence | None:
        """The node where the gradient first turns non-finite in backward: finite arriving,
        non-finite leaving, at the most points."""
        best, best_count = None, 0
        for node in reversed(self.evidence.nodes):
            arriving = self.at(node.arriving)
            if arriving is None:
                continue
            leaving = [self.at(g) for g in node.leaving]
            bad_out = torch.zeros(self.size, dtype=torch.bool)
            for g in leaving:
                if g is not None:
                    bad_out |= ~torch.isfinite(g)
            count = int((torch.isfinite(arriving) & bad_out).sum())
            if count > best_count:
                best, best_count = node, count
        return best

    def leaked(self, origin: NodeEvidence | None) -> Cause | None:
        if origin is None:
            return None
        for node in self.evidence.nodes:
            if node.call != "where" or len(node.inputs) < 3:
                continue
            cond = self.at(node.inputs[0])
            if cond is None:
                continue
            branches = node.node.next_functions
            for position, (branch, _) in enumerate(branches[:2]):
                if branch is None or id(origin.node) not in self.evidence.upstream(branch):
                    continue
                unselected = ~cond.bool() if position == 0 else cond.bool()
                share = float(unselected.float().mean())
                if share < 0.5:
                    continue
                value = self.at(origin.output)
                made = "nan" if value is not None and bool(torch.isnan(value).any()) else "an infinite derivative"
                which = "first" if position == 0 else "second"
                return Cause(
                    "leaked_branch", "", 0, {},
                    f"the nan starts at {origin.name}{self._of(origin)}, inside the {which} branch of "
                    f"where{self._of(node)}, which the condition did not select at these points; "
                    f"its {made} there times the zero gradient where() sends to an unselected branch is nan",
                    node=origin.name, source=self.text(origin),
                )
        return None

    def from_inf(self, inf: NodeEvidence, origin: NodeEvidence | None) -> Cause:
        zero = next((i for i in (self.at(x) for x in inf.inputs) if i is not None and bool((i == 0).any())), None)
        factors = self._factors(origin) if origin is not None else []
        if zero is not None and inf.call in ("log", "log2", "log10", "div", "reciprocal", "rsqrt", "pow"):
            made = self.producer_of_zero()
            if made is not None and made.call in ("add", "sub"):
                return Cause("cancellation", "", 0, {},
                             f"{self._name(made)} cancels to exactly 0 at these points (its terms are equal in "
                             f"{self._dtype()}), and {self._name(inf)} of that 0 is infinite",
                             node=made.name, source=self.text(made), factors=factors)
            what = self._name(made) if made is not None else "its argument"
            return Cause("overflow", "", 0, {},
                         f"{what} underflows to 0 in {self._dtype()} at these points, so {self._name(inf)} is "
                         f"±inf while the exact derivative is finite", node=inf.name, source=self.text(inf),
                         factors=factors)
        return Cause("overflow", "", 0, {},
                     f"{self._name(inf)} overflows to ±inf in {self._dtype()}, from finite inputs, at these points "
                     f"while the exact derivative is finite"
                     + (f"; in backward the gradient arriving at {factors[1]['node']} is {factors[0]['value']} and its "
                        f"local derivative {factors[1]['value']}: 0·inf = nan" if factors else ""),
                     node=inf.name, source=self.text(inf), factors=factors)

    def producer_of_zero(self) -> NodeEvidence | None:
        """The first node whose value is 0 from nonzero inputs."""
        for node in self.evidence.nodes:
            out = self.at(node.output)
            if out is None or not bool((out == 0).float().mean() > 0.5):
                continue
            inputs = [self.at(i) for i in node.inputs]
            if all(i is None or i.dtype == torch.bool or bool((i != 0).all()) for i in inputs):
                return node
        return None

    def inf_minus_inf(self) -> Cause | None:
        for node in reversed(self.evidence.nodes):
            arriving = self.at(node.arriving)
            if arriving is None or not bool(torch.isnan(arriving).any()) or len(node.consumers) < 2:
                continue
            parts = [self.at(c.leaving[i]) if i < len(c.leaving) else None for c, i in node.consumers]
            if any(p is None or bool(torch.isnan(p).any()) for p in parts):
                continue
            factors = [{"node": c.name, "source": self.text(c), "value": _fmt(float(p[0]))}
                       for (c, _), p in zip(node.consumers, parts)]
            return Cause("inf_minus_inf", "", 0, {},
                         f"the gradients meeting at {node.name}{self._of(node)} are +inf and -inf: inf - inf = nan",
                         node=node.name, source=self.text(node), factors=factors)
        return None

    def zero_times_inf(self, origin: NodeEvidence) -> Cause | None:
        factors = self._factors(origin)
        if not factors:
            return None
        return Cause("zero_times_inf", "", 0, {},
                     f"at {origin.name}{self._of(origin)} a gradient of {factors[0]['value']} arrives from "
                     f"{factors[0]['node']} and the local derivative is {factors[1]['value']}: 0·inf = nan, "
                     "while the exact derivative is finite",
                     node=origin.name, source=self.text(origin), factors=factors)

    def _factors(self, origin: NodeEvidence) -> list[dict[str, Any]]:
        """[arriving gradient, local derivative] at `origin` when one is 0 and the other ±inf."""
        arriving = self.at(origin.arriving)
        local = [self.at(g) for g in origin.local_derivative()]
        if arriving is None:
            return []
        for d in local:
            if d is None:
                continue
            hit = ((arriving == 0) & torch.isinf(d)) | (torch.isinf(arriving) & (d == 0))
            if bool(hit.any()):
                i = int(hit.nonzero()[0])
                sender = next((c for c, _ in origin.consumers), None)
                return [
                    {"node": sender.name if sender else "the output", "source": self.text(sender) if sender else None,
                     "value": _fmt(float(arriving[i])), "role": "gradient arriving"},
                    {"node": origin.name, "source": self.text(origin), "value": _fmt(float(d[i])),
                     "role": "local derivative"},
                ]
        return []

    def finite(self, got: torch.Tensor, exact: list[float]) -> Cause:
        inf = self.first_inf()
        if inf is not None:
            return self.from_inf(inf, None)
        truth = torch.tensor(exact, dtype=torch.float64)
        rel = ((got - truth).abs() / truth.abs().clamp_min(1e-300))
        worst, best = int(rel.argmax()), int(rel.argmin())
        digits = _digits(self._torch_dtype())
        lost = min(digits, max(0.0, digits + math.log10(max(float(rel[worst]), 1e-300))))
        return Cause("cancellation", "", 0, {},
                     f"finite but inaccurate: the relative error grows from {float(rel[best]):.1g} to "
                     f"{float(rel[worst]):.1g} toward the worst point, {lost:.0f} of {digits:.0f} "
                     f"{self._dtype()} digits lost (the exact value is evaluated with 50 digits)")

    # -- words ------------------------------------------------------------------------------
    def _torch_dtype(self) -> torch.dtype:
        outputs = [node.output for node in self.evidence.nodes if node.output is not None]
        return outputs[0].dtype if outputs else torch.float64

    def _dtype(self) -> str:
        return str(self._torch_dtype()).removeprefix("torch.")

    def _name(self, node: NodeEvidence) -> str:
        text = self.text(node)
        return text if text else node.call

    def _of(self, node: NodeEvidence) -> str:
        text = self.text(node)
        return f" ({text})" if text else ""


def _digits(dtype: torch.dtype) -> float:
    return -math.log10(torch.finfo(dtype).eps)


def _fmt(value: float) -> str:
    return f"{value:.6g}"

