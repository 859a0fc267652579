"""What one group of points' graph evidence says: the reasoning of verify/causes/at_points.py, node by node.

Given graph/evidence.py's record of a computation on some points (every node's value, the
gradient arriving at and leaving it, its local derivative), `NodeReasoning` finds the node
where the gradient turns non-finite and why: a `where` branch not selected there, an
intermediate that overflows (or underflows to a 0 that a log or division then makes
infinite), gradients of +inf and -inf meeting, or a 0 gradient times an infinite local
derivative; for finite-but-wrong values, the digits lost. It reads nodes only, so the same
reasoning serves an expression's graph or, given its evidence, any computation torch records.
What it reads per node (node_view.py) and where it looks (node_search.py) are their own modules.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ...graph.evidence import NodeEvidence
from ...graph.nodes import inputs_of, is_accumulate
from .cause import Cause
from .node_search import NodeSearch
from .node_view import fmt


class NodeReasoning(NodeSearch):
    """The reasoning over one group's evidence (all tensors hold the group's points).

    What is read per node and where in the graph to look come from node_view.py and
    node_search.py; this class turns those findings into a `Cause`.
    """

    def nonfinite(self) -> Cause:
        origin = self.origin()
        leaked = self.leaked(origin)
        if leaked is not None:
            return leaked
        masked = self.masked_row()
        if masked is not None:
            return masked
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

    def leaked(self, origin: NodeEvidence | None) -> Any:
        if origin is None:
            return None
        for node in self.evidence.nodes:
            if node.call != "where" or len(node.inputs) < 3:
                continue
            cond = self.at(node.inputs[0])
            if cond is None:
                continue
            for position, branch in enumerate(inputs_of(node.node)[:2]):
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

    def masked_row(self) -> Any:
        """The nan born in a softmax whose input rows are -inf throughout (a padded attention
        mask), with the fill that wrote the -inf when it was the user's constant (masked_rows.py)."""
        from .masked_rows import masked_rows, why, written_nonfinite

        for node in self.evidence.nodes:
            found = masked_rows(node.call, node.inputs, node.kwargs, node.output)
            if found is None:
                continue
            fill = next((f for f in self.evidence.nodes if written_nonfinite(f.call, f.inputs)), None)
            return Cause("masked_row", "", 0, {}, why(found, self._name(node), self._name(fill) if fill else None),
                         node=node.name, source=self.text(node))
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

    def inf_minus_inf(self) -> Any:
        for node in reversed(self.evidence.nodes):
            arriving = self.at(node.arriving)
            if arriving is None or not bool(torch.isnan(arriving).any()) or len(node.consumers) < 2:
                continue
            parts = [self.at(c.leaving[i]) if i < len(c.leaving) else None for c, i in node.consumers]
            if any(p is None or bool(torch.isnan(p).any()) for p in parts):
                continue
            factors = [{"node": c.name, "source": self.text(c), "value": fmt(float(p[0]))}
                       for (c, _), p in zip(node.consumers, parts)]
            return Cause("inf_minus_inf", "", 0, {},
                         f"the gradients meeting at {node.name}{self._of(node)} are +inf and -inf: inf - inf = nan",
                         node=node.name, source=self.text(node), factors=factors)
        return self.inf_minus_inf_at_leaf()

    def inf_minus_inf_at_leaf(self) -> Any:
        """The same where the gradients meet at a leaf (a variable or a parameter)."""
        meeting: dict[int, list[tuple[NodeEvidence, torch.Tensor]]] = {}
        for node in self.evidence.nodes:
            for index, next_node in enumerate(inputs_of(node.node)):
                part = self.at(node.leaving[index]) if index < len(node.leaving) else None
                if next_node is not None and is_accumulate(next_node) and part is not None:
                    meeting.setdefault(id(next_node), []).append((node, part))
        for parts in meeting.values():
            if len(parts) < 2 or any(bool(torch.isnan(p).any()) for _, p in parts):
                continue
            total = parts[0][1].clone()
            for _, part in parts[1:]:
                total = total + part if part.numel() == total.numel() else total
            if not bool(torch.isnan(total).any()):
                continue
            factors = [{"node": n.name, "source": self.text(n), "value": fmt(float(p[torch.isinf(p)][0]))
                        if bool(torch.isinf(p).any()) else fmt(float(p[0])), "role": "gradient sent"}
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


def _digits(dtype: torch.dtype) -> float:
    return -math.log10(torch.finfo(dtype).eps)
