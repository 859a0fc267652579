"""Per graph node, what a cause finder needs to know: the value it computed, the gradient that
arrived at it, the gradient it passed on, and its local derivative.

`--flow` shows values; a cause needs tensors, kept here per node: the forward output (recorded
by targets/record.py's TorchFunctionMode while the program runs, so it works on any code that calls torch, an
expression or a user's model), the gradient arriving at the node (pre-hook), the gradients it
sends to each input (hook), and the local derivative (the node called with a gradient of ones,
which for an elementwise node is its diagonal Jacobian). Nodes are kept in the order torch
created them (forward order) with the call that made them, its tensor inputs, and, where the
builder left it, the source span.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..targets.record import watching
from .nodes import inputs_of, is_accumulate, reachable, walk

#: grad_fn.metadata key under which the torch builder stores a node's source span.
SPAN_KEY = "gradcli_span"


@dataclass
class NodeEvidence:
    """One graph node: its call, forward value and the gradients through it."""

    node: Any  # the grad_fn
    name: str  # grad_fn.name(): "ExpBackward0"
    call: str  # the torch call that made it: "exp", "add", "where"
    span: Any  # where in the source, when known
    output: torch.Tensor | None  # the forward value (detached); None for a node made inside a call
    inputs: list[Any]  # the call's arguments, tensors detached
    arriving: torch.Tensor | None = None  # gradient with respect to the output
    leaving: list[torch.Tensor | None] = field(default_factory=list)  # per next_functions entry
    consumers: list[tuple[NodeEvidence, int]] = field(default_factory=list)  # (node, its input index)
    # For replaying the forward exactly (exact/replay.py): the torch function called, its
    # keyword arguments, and which recorded results its arguments were (by id, while alive).
    func: Any = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    result_id: int | None = None
    argument_ids: list[int | None] = field(default_factory=list)

    def local_derivative(self) -> list[torch.Tensor | None]:
        """The node's backward applied to a gradient of ones: d output / d input, elementwise."""
        if self.output is None:
            return []
        with torch.no_grad():
            try:
                found = self.node(torch.ones_like(self.output))
            except (RuntimeError, TypeError):  # a node that cannot be called on its own
                return []
        found = found if isinstance(found, tuple) else (found,)
        return [g.detach() if isinstance(g, torch.Tensor) else None for g in found]


@dataclass
class Evidence:
    """Every node a program built, in forward order, after one backward pass."""

    nodes: list[NodeEvidence]
    output: Any
    gradients: dict[str, torch.Tensor | None]
    leaves: dict[str, torch.Tensor] = field(default_factory=dict)  # what the gradients are of

    def leaf_nodes(self) -> list[NodeEvidence]:
        """Each leaf as a node of its own (its AccumulateGrad): its value, the gradient that
        reached it, and the nodes that used it, so that gradient parts meeting at a leaf
        (a function's own input used twice) are seen as at any node."""
        # One pass over the edges, not one per leaf: a model's thousands of parameters times
        # its thousands of nodes made this the slowest step of trace --flow (7 s of 11).
        users_of: dict[int, list[tuple[NodeEvidence, int]]] = {}
        accumulates: dict[int, Any] = {}
        for node in self.nodes:
            for index, next_node in enumerate(inputs_of(node.node)):
                variable = getattr(next_node, "variable", None) if next_node is not None else None
                if variable is not None:
                    users_of.setdefault(id(variable), []).append((node, index))
                    accumulates.setdefault(id(variable), next_node)
        found = []
        for name, leaf in self.leaves.items():
            users = users_of.get(id(leaf), [])
            if users:
                accumulate = accumulates[id(leaf)]
                found.append(NodeEvidence(accumulate, "AccumulateGrad", name, None, leaf.detach(), [],
                                          arriving=self.gradients.get(name), consumers=users, result_id=id(leaf)))
        return found

    def by_node(self) -> dict[Any, NodeEvidence]:
        return {id(e.node): e for e in self.nodes}

    def upstream(self, node: Any) -> set[int]:
        """ids of `node` and every node it depends on (along its edges)."""
        return reachable(node)


class CallLog:
    """The calls that made a graph node, in order, heard through targets/record.py's mode."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Any], Any, Any, dict[str, Any]]] = []

    def before(self, func: Any, args: Any) -> None:
        return None

    def called(self, func: Any, args: Any, kwargs: dict[str, Any], result: Any, before: Any) -> None:
        if isinstance(result, torch.Tensor) and result.grad_fn is not None:
            self.calls.append((_call_name(func), [*args, *kwargs.values()], result, func, dict(kwargs)))


def _call_name(func: Any) -> str:
    """`exp`, `add` for `Tensor.__add__` and `Tensor.__radd__`, `pow` for `__rpow__`."""
    name = getattr(func, "__name__", str(func))
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name.startswith("r") and name[1:] in ("add", "sub", "mul", "div", "truediv", "pow", "matmul"):
            name = name[1:]
    return name


def gather(run: Callable[[], Any], leaves: dict[str, torch.Tensor] | None) -> Evidence:
    """Run `run()` (which computes from `leaves`) recording every node, then backward from its
    output with a gradient of ones, recording the gradient through every node. With `leaves`
    None, `run()` makes its own and returns (output, leaves): a target that builds itself."""
    from .._deep import run_deep

    # The mode is thread-local: `run` must run in this thread, and the builder runs deep
    # programs in a thread of its own unless it is already in one.
    return run_deep(_gather, run, leaves)


def _gather(run: Callable[[], Any], leaves: dict[str, torch.Tensor] | None) -> Evidence:
    recorder = CallLog()
    with watching(recorder):
        output = run()
    if leaves is None:
        output, leaves = output
    return gather_recorded(recorder, output, leaves)


def gather_recorded(recorder: "CallLog", output: Any, leaves: dict[str, torch.Tensor]) -> Evidence:
    """The evidence of a forward already run with `recorder` listening (`with watching(recorder):`):
    a training step's loss, recorded as it was computed (gradcli watch's rerun)."""
    nodes: list[NodeEvidence] = []
    known: dict[int, NodeEvidence] = {}
    for call, args, result, func, kwargs in recorder.calls:
        grad_fn = result.grad_fn
        if id(grad_fn) in known:  # an in-place call returns a tensor already seen
            continue
        inputs = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        evidence = NodeEvidence(grad_fn, grad_fn.name(), call, grad_fn.metadata.get(SPAN_KEY),
                                result.detach().clone(), inputs, func=func,
                                kwargs={k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()},
                                result_id=id(result),
                                argument_ids=[id(a) if isinstance(a, torch.Tensor) else None for a in args])
        known[id(grad_fn)] = evidence
        nodes.append(evidence)
    nodes = _with_inner_nodes(nodes, known)
    for evidence in nodes:
        for index, next_node in enumerate(inputs_of(evidence.node)):
            if next_node is not None and id(next_node) in known:
                known[id(next_node)].consumers.append((evidence, index))
    handles = []
    for evidence in nodes:
        handles.append(evidence.node.register_prehook(_arriving(evidence)))
        handles.append(evidence.node.register_hook(_leaving(evidence)))
    names = list(leaves)
    try:
        if isinstance(output, torch.Tensor) and output.requires_grad:
            grads = torch.autograd.grad(output, [leaves[n] for n in names], torch.ones_like(output),
                                        allow_unused=True, retain_graph=True)
        else:
            grads = tuple(None for _ in names)
    finally:
        for handle in handles:
            handle.remove()
    return Evidence(nodes, output, dict(zip(names, grads)), dict(leaves))


def _with_inner_nodes(nodes: list[NodeEvidence], known: dict[int, NodeEvidence]) -> list[NodeEvidence]:
    """`nodes` with the nodes a recorded call made inside itself (`1/x` is a reciprocal, then a
    multiplication) placed just before it: their gradients are recorded, their values are not."""
    ordered: list[NodeEvidence] = []

    def inner_node(node: Any) -> bool:  # not recorded, and not a leaf's
        return id(node) not in known and not is_accumulate(node)

    for evidence in nodes:
        inner: list[NodeEvidence] = []
        for node in walk(inputs_of(evidence.node), enter=inner_node, order="post"):
            name = node.name()
            made = NodeEvidence(node, name, name.removesuffix("Backward0").lower(),
                                node.metadata.get(SPAN_KEY) or evidence.span, None, [])
            known[id(node)] = made
            inner.append(made)
        ordered += [*inner, evidence]  # each after its inputs: the order the call made them
    return ordered


def _arriving(evidence: NodeEvidence) -> Any:
    def prehook(grad_outputs: tuple[Any, ...]) -> None:
        first = grad_outputs[0] if grad_outputs else None
        evidence.arriving = first.detach().clone() if isinstance(first, torch.Tensor) else None

    return prehook


def _leaving(evidence: NodeEvidence) -> Any:
    def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
        evidence.leaving = [g.detach().clone() if isinstance(g, torch.Tensor) else None for g in grad_inputs]

    return hook
