"""What `trace` returns: a TraceResult, plain data the rich, JSON and DOT renderers read.

The records (a leaf, an assigned intermediate, a pass, a gradient's own graph) hold values as
lists and names, never live tensors: the graph walk and the passes are over when a result
exists. The functions at the end turn a live tensor or a pass record into one of them, a
model's large tensors kept as a summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import words
from ..outcome import Problem, Reported, sentence
from ..targets.base import LeafSource
from ..graph.explain import PassError, nonleaf_note
from ..graph.flow import FlowStep
from ..graph.walk import Graph
from ..graph.passes import PassMode, current_grad
from ..graph.values import dtype_name, full_value, large_summary


@dataclass
class Leaf:
    """A variable: its value, how it was given, its .grad after the last pass."""

    name: str
    spec: str
    defaulted: bool
    shape: list[int]
    dtype: str
    requires_grad: bool
    value: Any
    grad: Any = None


@dataclass
class Intermediate:
    """An assigned name bound to a non-leaf tensor; `.grad` only with --retain-grad."""

    name: str
    node: str | None  # the graph node that produced it
    retained: bool
    grad: Any = None
    note: str | None = None


@dataclass
class Pass:
    """One pass as plain data."""

    index: int
    mode: PassMode
    retain_graph: bool
    create_graph: bool
    grads: dict[str, Any]
    grad_fns: dict[str, str | None]
    nonfinite: list[str]
    error: PassError | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class GradientGraph:
    """With --create-graph: a gradient's own grad_fn graph and d/dv sum(gradient)."""

    of: str
    graph: Graph
    second: Any = None  # nested list: the elementwise second derivative for elementwise functions
    note: str | None = None


@dataclass
class TraceResult(Reported):
    """What `gradcli trace` found (outcome.py's protocol: `ok`, `problems`, `notes`, `as_dict()`)."""

    expression: str
    result: dict[str, Any]
    leaves: list[Leaf]
    graph: Graph
    passes: list[Pass]
    intermediates: list[Intermediate]
    seed: int | None  # None when nothing random was drawn (no seed to repeat)
    options: dict[str, Any]
    skipped_passes: int = 0
    flow: list[FlowStep] | None = None
    nonfinite_origin: str | None = None
    cause: Any = None  # why the gradient is not finite (verify/causes/run.py), with --flow
    gradient_graphs: list[GradientGraph] = field(default_factory=list)
    # Code targets only (None for an expression):
    target: dict[str, Any] | None = None  # {"kind", "name", "found"}: what NAME turned out to be
    modules: list[dict[str, Any]] | None = None  # path, class, parameters, inputs, output shapes
    forward_nonfinite: dict[str, Any] | None = None  # --flow: the first forward call with nan/inf
    symbolic: Any = None  # with --symbolic: the chain rule node by node (chain/result.py ChainRule)

    @property
    def problems(self) -> list[Problem]:
        """What makes the exit status 1: autograd errors and non-finite gradients, as records
        (their sentences are declared at the end of this module)."""
        found = [Problem("pass-error", f"pass {p.index + 1}", {"pass": p.index, "type": p.error.type,
                                                                "message": p.error.message})
                 for p in self.passes if p.error]
        found += [Problem("nonfinite-gradient", name, {"pass": p.index}) for p in self.passes for name in p.nonfinite]
        if self.nonfinite_origin is not None:
            found.append(Problem("nonfinite-origin", self.nonfinite_origin))
        if self.forward_nonfinite is not None:
            found.append(Problem("forward-nonfinite", self.forward_nonfinite["call"], dict(self.forward_nonfinite)))
        if self.symbolic is not None:
            found += self.symbolic.problems
        if self.cause is not None and self.cause.kind == "cancellation":
            found.append(Problem("cancellation", self.cause.derivative,
                                 {"source": self.cause.source, "points": self.cause.points}))
        return found

    @property
    def notes(self) -> list[str]:
        """Nothing beside the problems: a pass's warnings are in its own record."""
        return []

    def as_dict(self) -> dict[str, Any]:
        """The `trace --json` document (docs/json.md)."""
        from .document import trace_document

        return trace_document(self)


#: A leaf, a gradient or the output above this many elements is kept as a summary unless
#: --full-values asks for every value (listing 5e7 values as Python numbers took more than 6 GB).
FULL_VALUES = 10_000


def leaf_record(name: str, tensor: Any, source: LeafSource, whole: bool = True, made: dict | None = None) -> Leaf:
    """`whole`: every value (--full-values); else large tensors (a model's weights) summarised.
    `made`: summaries already made in this trace (see `_values`)."""
    grad = tensor.grad
    return Leaf(
        name, source.spec, source.defaulted, list(tensor.shape), dtype_name(tensor),
        tensor.requires_grad, _values(tensor, whole, made), None if grad is None else _values(grad, whole, made),
    )


def _values(tensor: Any, whole: bool, made: dict | None = None) -> Any:
    # After the last backward pass a weight's .grad and the pass's gradient are one tensor:
    # its values are read once and are one list in both records, which the JSON writer then
    # encodes once (bench/model.py: 2,202 gradients, 3.5 MB of the document); its summary (a
    # float64 copy for the norm: 0.22 s for GPT-2's 38M-element embedding) is made once.
    # Same memory, same view and same version counter: the same values.
    key = _identity(tensor) if made is not None else None
    if key is not None and key in made:  # type: ignore[operator]
        data = made[key]  # type: ignore[index]
    elif whole or tensor.numel() <= FULL_VALUES:
        data = full_value(tensor)
    else:
        data = large_summary(tensor)
    if key is not None:
        made[key] = data  # type: ignore[index]
    return dict(data) if isinstance(data, dict) else data


def _identity(tensor: Any) -> tuple[Any, ...] | None:
    try:
        return (tensor.data_ptr(), tuple(tensor.shape), tensor.stride(), tensor.dtype, tensor._version)
    except RuntimeError:  # a layout without one (sparse): read each time
        return None


def intermediate_record(name: str, tensor: Any, node_of: dict[int, str], kept: str | None, whole: bool = True) -> Intermediate:
    grad = current_grad(tensor) if kept else None
    return Intermediate(
        name, node_of.get(id(tensor.grad_fn)), kept is not None, None if grad is None else _values(grad, whole),
        kept or nonleaf_note(name),
    )


def pass_record(record: Any, whole: bool = True, made: dict | None = None) -> Pass:
    """`whole` as for `leaf_record`: a pass's gradient of a model's weight is that weight's
    `.grad`, so it is summarised as the leaf's is (ResNet-18's were 144 MB of the JSON, 11.7
    million numbers written in full, twice the CPU time of torchviz on the same model)."""
    return Pass(
        record.index, record.mode, record.retain_graph, record.create_graph,
        {name: None if g is None else _values(g, whole, made) for name, g in record.grads.items()},
        dict(record.grad_fns), record.nonfinite, record.error, record.warnings,
    )


@sentence("pass-error")
def _pass_error(p: Problem) -> str:
    return words.pass_error_problem(p.detail["pass"], p.detail["type"], p.detail["message"])


@sentence("nonfinite-gradient")
def _nonfinite_gradient(p: Problem) -> str:
    return words.nonfinite_problem(p.detail["pass"], p.subject)


@sentence("nonfinite-origin")
def _nonfinite_origin(p: Problem) -> str:
    return words.nonfinite_origin_problem(p.subject)


@sentence("forward-nonfinite")
def _forward_nonfinite(p: Problem) -> str:
    return words.forward_nonfinite_problem(p.detail)


@sentence("cancellation")
def _cancellation(p: Problem) -> str:
    return words.cancellation_problem(words.Fields(derivative=p.subject, **p.detail))
