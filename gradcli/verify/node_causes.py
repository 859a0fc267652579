"""What one group of points' graph evidence says: the reasoning of verify/causes.py, node by node.

Given inspect/evidence.py's record of a computation on some points (every node's value, the
gradient arriving at and leaving it, its local derivative), `NodeReasoning` finds the node
where the gradient turns non-finite and why: a `where` branch not selected there, an
intermediate that overflows (or underflows to a 0 that a log or division then makes
infinite), gradients of +inf and -inf meeting, or a 0 gradient times an infinite local
derivative; for finite-but-wrong values, the digits lost. It reads nodes only, so the same
reasoning serves an expression's graph or, given its evidence, any computation torch records.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..inspect.evidence import Evidence, NodeEvidence
from .cause import Cause


class NodeReasoning:
    """The reasoning over one group's evidence (all tensors hold the group's points)."""

    def __init__(self, evidence: Evidence, size: int | None, source: str, *, exact_known: bool | None = None) -> None:
        self.evidence = evidence
        self.size = size  # None: whole tensors of any shapes (a model's graph), not points
        self.source = source
        # Whether the exact derivative is known to be finite there: check's points and
        # elements, not a model's graph (trace computes no exact derivative).
        self.exact_known = size is not None if exact_known is None else exact_known

    # -- per-point views --------------------------------------------------------------------
    def at(self, value: Any) -> torch.Tensor | None:
        """`value` as one number per point (a scalar broadcast), or None if not a tensor."""
        if not isinstance(value, torch.Tensor) or value.is_complex():
            return None
        value = value.detach().to(torch.float64) if value.dtype != torch.bool else value.detach()
        if self.size is None:
            return value.reshape(-1)
        if value.numel() == self.size:
            return value.reshape(-1)
        if value.numel() == 1:
            return value.reshape(1).expand(self.size)
        return None

    def text(self, evidence: NodeEvidence) -> str | None:
        span = evidence.span
        if isinstance(span, str):  # a user's source line, "file.py:12: code"
            return span
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
                if i is None or i.dtype == torch.bool:
                    continue
                if i.numel() == made.numel():
                    made &= torch.isfinite(i)
                elif not bool(torch.isfinite(i).all()):  # shapes differ (a matmul): whole tensors
                    made &= False
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
            underflow = self.underflow_into_infinite_slope(origin)
            if underflow is not None:
                return underflow
            if not self.exact_known and self._own_value(origin):
                return Cause("undefined", "", 0, {},
                             f"the local derivative of {origin.name}{self._of(origin)} is itself infinite or "
                             "undefined at these inputs, and a finite gradient arrives: not a numerical accident "
                             "(gradcli check compares it with the exact derivative)",
                             node=origin.name, source=self.text(origin))
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
            if self.size is None:  # whole tensors: finite in, something non-finite out
                out_bad = any(g is not None and not bool(torch.isfinite(g).all()) for g in leaving)
                count = int(bool(torch.isfinite(arriving).all()) and out_bad)
                if count > best_count:
                    best, best_count = node, count
                continue
            bad_out = torch.zeros(self.size, dtype=torch.bool)
            for g in leaving:
                if g is not None:
                    bad_out |= ~torch.isfinite(g)
            count = int((torch.isfinite(arriving) & bad_out).sum())
            if count > best_count:
                best, best_count = node, count
        return best

    def leaked(self, origin: NodeEvidence | None) -> Any:
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
                if share < 0.5 if self.size is not None else not bool(unselected.any()):
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

    def from_inf(self, inf: NodeEvidence, origin: NodeEvidence | None) -> Any:
        zero = next((i for i in (self.at(x) for x in inf.inputs) if i is not None and bool((i == 0).any())), None)
        factors = self._factors(origin) if origin is not None else []
        if zero is not None and inf.call in ("log", "log2", "log10", "div", "reciprocal", "rsqrt", "pow"):
            made = self.zero_input_of(inf) or self.producer_of_zero()
            if made is not None and made.call in ("add", "sub") and self.size is None and self._identical(made):
                return Cause("undefined", "", 0, {},
                             f"{self._name(made)} subtracts a value from itself, so it is exactly 0, and "
                             f"{self._name(inf)} of 0 is infinite: the function itself is not finite there",
                             node=made.name, source=self.text(made), factors=factors)
            if made is not None and made.call in ("add", "sub"):
                return Cause("cancellation", "", 0, {},
                             f"{self._name(made)} cancels to exactly 0 at these points (its terms are equal in "
                             f"{self._dtype()}), and {self._name(inf)} of that 0 is infinite",
                             node=made.name, source=self.text(made), factors=factors)
            what = self._name(made) if made is not None else "its argument"
            return Cause("overflow", "", 0, {},
                         f"{what} underflows to 0 in {self._dtype()} at these points, so {self._name(inf)} is "
                         f"±inf{self._exact_finite()}", node=inf.name, source=self.text(inf),
                         factors=factors)
        return Cause("overflow", "", 0, {},
                     f"{self._name(inf)} overflows to ±inf in {self._dtype()}, from finite inputs, at these points"
                     f"{self._exact_finite()}"
                     + (f"; in backward the gradient arriving at {factors[1]['node']} is {factors[0]['value']} and its "
                        f"local derivative {factors[1]['value']}: 0·inf = nan" if factors else ""),
                     node=inf.name, source=self.text(inf), factors=factors)

    def zero_input_of(self, node: NodeEvidence) -> NodeEvidence | None:
        """The node that made `node`'s input 0 at some element from nonzero inputs (softmax of
        -1000 beside 0): on whole tensors one such element is enough, where producer_of_zero
        asks for most points."""
        known = self.evidence.by_node()
        for next_node, _ in node.node.next_functions:
            made = known.get(id(next_node)) if next_node is not None else None
            out = self.at(made.output) if made is not None else None
            if out is None or not bool((out == 0).any()):
                continue
            zero = out == 0
            inputs = [self.at(i) for i in made.inputs]
            if all(i is None or i.dtype == torch.bool or bool((i[zero] != 0).all() if i.numel() == out.numel()
                                                                  else (i != 0).any()) for i in inputs):
                return made
        return None

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

    def inf_minus_inf(self) -> Any:
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
        return self.inf_minus_inf_at_leaf()

    def inf_minus_inf_at_leaf(self) -> Any:
        """The same where the gradients meet at a leaf (a variable or a parameter)."""
        meeting: dict[int, list[tuple[NodeEvidence, torch.Tensor]]] = {}
        for node in self.evidence.nodes:
            for index, (next_node, _) in enumerate(node.node.next_functions):
                part = self.at(node.leaving[index]) if index < len(node.leaving) else None
                if next_node is not None and hasattr(next_node, "variable") and part is not None:
                    meeting.setdefault(id(next_node), []).append((node, part))
        for parts in meeting.values():
            if len(parts) < 2 or any(bool(torch.isnan(p).any()) for _, p in parts):
                continue
            total = parts[0][1].clone()
            for _, part in parts[1:]:
                total = total + part if part.numel() == total.numel() else total
            if not bool(torch.isnan(total).any()):
                continue
            factors = [{"node": n.name, "source": self.text(n), "value": _fmt(float(p[torch.isinf(p)][0]))
                        if bool(torch.isinf(p).any()) else _fmt(float(p[0])), "role": "gradient sent"}
                       for n, p in parts]
            return Cause("inf_minus_inf", "", 0, {},
                         "the gradients meeting at the leaf are +inf and -inf: inf - inf = nan",
                         node=parts[0][0].name, source=self.text(parts[0][0]), factors=factors)
        return None

    def zero_times_inf(self, origin: NodeEvidence) -> Any:
        factors = self._factors(origin)
        if not factors:
            return None
        return Cause("zero_times_inf", "", 0, {},
                     f"at {origin.name}{self._of(origin)} a gradient of {factors[0]['value']} arrives from "
                     f"{factors[0]['node']} and the local derivative is {factors[1]['value']}: 0·inf = nan"
                     f"{self._exact_finite(',')}",
                     node=origin.name, source=self.text(origin), factors=factors)

    def underflow_into_infinite_slope(self, origin: NodeEvidence) -> Any:
        """sqrt(exp(x)) at x = -1000: exp underflows to 0 from a nonzero input, sqrt's slope at
        that 0 is infinite, and in backward that inf meets exp's local derivative, 0: nan.
        (stanli #144: a spectral density of exp(-877) under a sqrt.)"""
        made = self.zero_input_of(origin)
        if made is None or made.call in ("add", "sub", "mul") or not self._own_value(origin):
            return None
        leaving = [self.at(g) for g in made.leaving]
        if not any(g is not None and bool(torch.isnan(g).any()) for g in leaving):
            return None
        return Cause("overflow", "", 0, {},
                     f"{self._name(made)} underflows to 0 in {self._dtype()} at these points, where the slope of "
                     f"{self._name(origin)} is infinite; in backward that inf meets the local derivative of "
                     f"{self._name(made)}, 0: 0·inf = nan{self._exact_finite(',')}",
                     node=made.name, source=self.text(made),
                     factors=[{"node": origin.name, "source": self.text(origin), "value": "inf",
                               "role": "gradient arriving"},
                              {"node": made.name, "source": self.text(made), "value": "0",
                               "role": "local derivative"}])

    def _exact_finite(self, joint: str = "") -> str:
        """What check knows and a whole computation (no exact derivative) does not."""
        return f"{joint} while the exact derivative is finite" if self.exact_known else ""

    def _own_value(self, origin: NodeEvidence) -> bool:
        """Whether a nonzero finite gradient arrives at `origin` where its local derivative is
        not finite: the non-finite gradient is the derivative's own value (sqrt at 0)."""
        arriving = self.at(origin.arriving)
        if arriving is None:
            return False
        for d in (self.at(g) for g in origin.local_derivative()):
            if d is not None and d.numel() == arriving.numel():
                if bool((~torch.isfinite(d) & torch.isfinite(arriving) & (arriving != 0)).any()):
                    return True
        return False

    def _factors(self, origin: NodeEvidence) -> list[dict[str, Any]]:
        """[arriving gradient, local derivative] at `origin` when one is 0 and the other ±inf."""
        arriving = self.at(origin.arriving)
        local = [self.at(g) for g in origin.local_derivative()]
        if arriving is None:
            return []
        for d in local:
            if d is None or d.numel() != arriving.numel():
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

    def finite(self, got: torch.Tensor, exact: list[float]) -> Any:
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

    def _identical(self, node: NodeEvidence) -> bool:
        """Whether a subtraction's two tensor operands hold the same values (h - h)."""
        tensors = [i for i in node.inputs if isinstance(i, torch.Tensor)]
        return len(tensors) == 2 and tensors[0].shape == tensors[1].shape and bool(torch.equal(*tensors))

    def _name(self, node: NodeEvidence) -> str:
        if isinstance(node.span, str):  # a user's line: the call, then where it is
            return f"{node.call}() at {node.span}"
        text = self.text(node)
        return text if text else node.call

    def _of(self, node: NodeEvidence) -> str:
        text = self.text(node)
        return f" ({text})" if text else ""


def _digits(dtype: torch.dtype) -> float:
    return -math.log10(torch.finfo(dtype).eps)


def _fmt(value: float) -> str:
    return f"{value:.6g}"
