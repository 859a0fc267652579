"""How one group's graph evidence reads: a value per point, a node's source text, its name in a sentence.

verify/causes/nodes.py reasons over graph/evidence.py's record node by node, on a group of
points (check) or on whole tensors (trace's model graph). Both ask the same small questions
of every node before any reasoning: its value as one number per point, the text of the
expression or the source line it came from, and the words that name it in a cause. They
live here, under verify/causes/node_search.py (where in the graph) and verify/causes/nodes.py (why).
"""

from __future__ import annotations

from typing import Any

import torch

from ...graph.evidence import Evidence, NodeEvidence


class NodeView:
    """One group's evidence (all tensors hold the group's points), read node by node."""

    def __init__(self, evidence: Evidence, size: int | None, source: str, *, exact_known: bool | None = None) -> None:
        self.evidence = evidence
        self.size = size  # None: whole tensors of any shapes (a model's graph), not points
        self.source = source
        # Whether the exact derivative is known to be finite there: check's points and
        # elements, not a model's graph (trace computes no exact derivative).
        self.exact_known = size is not None if exact_known is None else exact_known

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

    def _torch_dtype(self) -> torch.dtype:
        outputs = [node.output for node in self.evidence.nodes if node.output is not None]
        return outputs[0].dtype if outputs else torch.float64

    def _dtype(self) -> str:
        return str(self._torch_dtype()).removeprefix("torch.")

    def _name(self, node: NodeEvidence) -> str:
        if isinstance(node.span, str):  # a user's line: the call, then where it is
            return f"{node.call}() at {node.span}"
        text = self.text(node)
        return text if text else node.call

    def _of(self, node: NodeEvidence) -> str:
        text = self.text(node)
        return f" ({text})" if text else ""

    def _exact_finite(self, joint: str = "") -> str:
        """What check knows and a whole computation (no exact derivative) does not."""
        return f"{joint} while the exact derivative is finite" if self.exact_known else ""


def fmt(value: float) -> str:
    """A value in a cause's factors: six significant digits."""
    return f"{value:.6g}"
