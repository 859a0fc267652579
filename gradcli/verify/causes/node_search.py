"""Where in one group's graph: the nodes verify/causes/nodes.py builds its causes on.

The node where the gradient first turns non-finite in backward, the first value that is
infinite from finite inputs, the node that made a 0 from nonzero inputs, and the pair of
factors (a 0 gradient, an infinite local derivative) that multiply to nan. Each is a search
over graph/evidence.py's nodes; what the finding means is verify/causes/nodes.py's to say.
"""

from __future__ import annotations

from typing import Any

import torch

from ...graph.evidence import NodeEvidence
from ...graph.nodes import inputs_of
from .node_view import NodeView, fmt


class NodeSearch(NodeView):
    """The searches over one group's evidence."""

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

    def zero_input_of(self, node: NodeEvidence) -> NodeEvidence | None:
        """The node that made `node`'s input 0 at some element from nonzero inputs (softmax of
        -1000 beside 0): on whole tensors one such element is enough, where producer_of_zero
        asks for most points."""
        known = self.evidence.by_node()
        for next_node in inputs_of(node.node):
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
                     "value": fmt(float(arriving[i])), "role": "gradient arriving"},
                    {"node": origin.name, "source": self.text(origin), "value": fmt(float(d[i])),
                     "role": "local derivative"},
                ]
        return []

    def _identical(self, node: NodeEvidence) -> bool:
        """Whether a subtraction's two tensor operands hold the same values (h - h)."""
        tensors = [i for i in node.inputs if isinstance(i, torch.Tensor)]
        return len(tensors) == 2 and tensors[0].shape == tensors[1].shape and bool(torch.equal(*tensors))

