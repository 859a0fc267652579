"""Follow the gradient through every node during backward, with torch's own node hooks.

A pre-hook sees the gradient arriving at a node (torch's `grad_outputs`: with respect to
the node's outputs); a hook sees it leave (`grad_inputs`: with respect to the node's
inputs, the gradient passed on along `next_functions`). Both fire on every pass, in the
order the engine runs the nodes, AccumulateGrad included. The first node whose outgoing
gradient holds a nan or inf is where a non-finite gradient was born: the `origin`.

Hooks return None (a returned value would replace the gradient) and are removed when the
recorder closes, so the graph is left as it was found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .values import all_finite, full_value


@dataclass
class FlowStep:
    """One node's run in one pass: what arrived and what left, as plain values."""

    node: str
    pass_index: int
    grad_outputs: list[Any] = field(default_factory=list)  # arriving (None for an undefined grad)
    grad_inputs: list[Any] | None = None  # leaving; None when the node raised before finishing
    nonfinite: bool = False  # whether anything leaving it is nan or inf


class FlowRecorder:
    """Hooks on every node of a walked graph; use as a context manager around the passes."""

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects  # node id -> grad_fn (Graph.objects)
        self.steps: list[FlowStep] = []
        self.pass_index = 0
        self._pending: dict[str, FlowStep] = {}
        self._handles: list[Any] = []

    def __enter__(self) -> "FlowRecorder":
        for node_id, grad_fn in self.objects.items():
            self._handles.append(grad_fn.register_prehook(self._arriving(node_id)))
            self._handles.append(grad_fn.register_hook(self._leaving(node_id)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _arriving(self, node_id: str) -> Any:
        def prehook(grad_outputs: tuple[Any, ...]) -> None:
            step = FlowStep(node_id, self.pass_index, _values(grad_outputs))
            self._pending[node_id] = step
            self.steps.append(step)

        return prehook

    def _leaving(self, node_id: str) -> Any:
        def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
            step = self._pending.pop(node_id, None)
            if step is None:  # a pre-hook always fires first; this is a safety net
                step = FlowStep(node_id, self.pass_index, _values(grad_outputs))
                self.steps.append(step)
            step.grad_inputs = _values(grad_inputs)
            step.nonfinite = any(g is not None and not all_finite(g) for g in grad_inputs)

        return hook

    def start_pass(self, index: int) -> None:
        """Mark the start of pass `index` (the steps it records carry that index)."""
        self.pass_index = index
        self._pending.clear()

    def origin(self) -> str | None:
        """The first node, in running order, whose outgoing gradient is non-finite."""
        return nonfinite_origin(self.steps)


def nonfinite_origin(steps: Iterable[FlowStep]) -> str | None:
    return next((step.node for step in steps if step.nonfinite), None)


def _values(grads: Iterable[Any]) -> list[Any]:
    # The engine may reuse or accumulate into these buffers later: keep copies.
    return [None if g is None else g.detach().clone() for g in grads]


def plain_steps(steps: Iterable[FlowStep]) -> list[FlowStep]:
    """The steps with every recorded gradient (a tensor) replaced by its nested-list value."""
    out = []
    for step in steps:
        out.append(
            FlowStep(
                step.node, step.pass_index, [_plain(g) for g in step.grad_outputs],
                None if step.grad_inputs is None else [_plain(g) for g in step.grad_inputs],
                step.nonfinite,
            )
        )
    return out


def _plain(value: Any) -> Any:
    return None if value is None else full_value(value)
