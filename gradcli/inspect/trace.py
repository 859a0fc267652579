"""`trace`: build an expression, walk its autograd graph, run backward passes, follow the flow.

This is the library behind `gradcli trace`; it returns plain data (`TraceResult`) that the
rich, JSON and DOT renderers read, and raises `GradcliError` for input it refuses:

    >>> from gradcli import trace
    >>> result = trace("x.pow(2).sum()", ["x=[1.0, 2.0]"])
    >>> result.leaves[0].grad
    [2.0, 4.0]

The graph is walked once, before any pass, so saved tensors are read while they exist.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .. import words
from ..errors import LimitError, UsageError
from ..targets.base import BuildSettings, Computation, LeafSource, OriginOf
from ..targets.expression import ExpressionTarget
from ..targets.resolve import as_target
from ..build.variables import make_tensor, parse_spec
from .explain import PassError, nonleaf_note
from .flow import FlowRecorder, FlowStep, plain_steps
from .graph import Graph, Labels, leaf_ids, walk_graph
from .._quiet_gc import paused_gc
from .passes import MODES, PassMode, PassPlan, current_grad, names_with_grad, run_passes, second_derivative
from .values import described, dtype_name, full_value, summary

#: Passes in one trace (each is a full backward).
MAX_REPEAT = 1000


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
class TraceResult:
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
    cause: Any = None  # why the gradient is not finite (verify/run_causes.py), with --flow
    gradient_graphs: list[GradientGraph] = field(default_factory=list)
    # Code targets only (None for an expression):
    target: dict[str, Any] | None = None  # {"kind", "name", "found"}: what NAME turned out to be
    modules: list[dict[str, Any]] | None = None  # path, class, parameters, inputs, output shapes
    forward_nonfinite: dict[str, Any] | None = None  # --flow: the first forward call with nan/inf
    symbolic: Any = None  # with --symbolic: the chain rule node by node (chain/result.py ChainRule)

    @property
    def problems(self) -> list[str]:
        """What makes the exit status 1: autograd errors and non-finite gradients."""
        found = [words.pass_error_problem(p.index, p.error.type, p.error.message) for p in self.passes if p.error]
        found += [words.nonfinite_problem(p.index, name) for p in self.passes for name in p.nonfinite]
        if self.nonfinite_origin is not None:
            found.append(words.nonfinite_origin_problem(self.nonfinite_origin))
        if self.forward_nonfinite is not None:
            found.append(words.forward_nonfinite_problem(self.forward_nonfinite))
        if self.symbolic is not None:
            found += self.symbolic.problems
        if self.cause is not None and self.cause.kind == "cancellation":
            found.append(words.cancellation_problem(self.cause))
        return found


@dataclass(frozen=True)
class TraceOptions:
    """How to run the passes: the options of `gradcli trace`, as `trace()` takes them."""

    mode: PassMode = "backward"
    wrt: tuple[str, ...] = ()
    grad_output: str | None = None
    retain_graph: bool = False
    create_graph: bool = False
    repeat: int = 1
    zero_grad: bool = False
    retain_grad: tuple[str, ...] = ()
    flow: bool = False
    dtype: str | None = None  # None: float64 for an expression, a model's own dtype for code
    device: str = "cpu"
    symbolic: bool = False


def trace(
    target: Any,
    *inputs: Any,
    loss: str | None = None,
    init: Sequence[str] = (),
    seed: int | None = None,
    library_dirs: Sequence[str | Path] = (),
    **options: Any,
) -> TraceResult:
    """Trace `target` and return what `gradcli trace` renders.

    `target` is an expression's text with its `--var` texts as `inputs` (one list of them:
    `trace("x*x", ["x=2.0"])`); code named as `"model.py:NAME"` or `"package.module:NAME"`
    (inputs: `--var` texts; `init`: `--init KEY=VALUE` texts); an nn.Module, a function or an
    autograd.Function called with `inputs` (tensors; other keywords are inputs by name, for
    forward or for `loss`); or a `Target`. `loss` reduces a code
    target's output (`"cross_entropy(out, labels)"`). Keyword options as in TraceOptions
    (mode, wrt, grad_output, retain_graph, create_graph, repeat, zero_grad, retain_grad, flow,
    dtype, device, symbolic); see `gradcli trace --help`."""
    for key in ("wrt", "retain_grad"):
        if key in options:
            options[key] = tuple(options[key])
    # Other keywords name a code target's inputs (forward's, or --loss's: labels=...).
    named = {key: options.pop(key) for key in list(options) if key not in _OPTION_NAMES}
    chosen = TraceOptions(**options)
    _check_options(chosen.mode, chosen.repeat)
    target = as_target(target, inputs, named, loss=loss, init=init, library_dirs=library_dirs)
    if chosen.symbolic and not isinstance(target, ExpressionTarget):
        raise UsageError(
            "--symbolic writes each node's local derivative from the expression's own operations, so it "
            "takes an expression, not code",
            hint="trace the code without --symbolic, or write the computation as an expression",
        )
    settings = BuildSettings(chosen.dtype, chosen.device, seed, chosen.wrt, chosen.flow, record=chosen.symbolic)
    with paused_gc():
        computation = target.build(settings)
        result = trace_computation(computation, chosen)
        if result.nonfinite_origin is not None:
            result.cause = _cause(target, settings, computation.description if computation.kind == "expression" else "")
        elif chosen.flow and computation.kind != "expression" and not result.problems:
            # every gradient finite and backward ran: a model's gradient may still have lost its digits
            result.cause = _cause(target, settings, "", cancellation=True)
        return result


_OPTION_NAMES = frozenset(TraceOptions.__dataclass_fields__)


def trace_computation(computation: Computation, options: TraceOptions) -> TraceResult:
    """Walk a built computation's graph, run the passes, follow the flow."""
    output = _differentiable_output(computation.output, computation.leaves, strict=computation.strict_output)
    leaves = computation.leaves
    named = names_with_grad([*leaves.items(), *computation.bindings])
    intermediates = {name: t for name, t in named.items() if name not in leaves and not t.is_leaf}
    for name in options.retain_grad:
        _known(name, intermediates, "--retain-grad", "an assigned intermediate (h = ...)").retain_grad()
    graph = walk_graph(
        output.grad_fn, leaf_names=leaf_ids(leaves), labels=Labels(computation.bindings),
        origin_of=computation.origin_of,
    )
    differentiable = {name: t for name, t in leaves.items() if t.requires_grad}
    _refuse_integer_targets(options.wrt, leaves)
    if options.wrt:
        targets = {name: _known(name, named, "--wrt", "a variable or an assigned name") for name in options.wrt}
    else:
        used = {node.variable for node in graph.nodes if node.variable} or set(differentiable)
        targets = {name: t for name, t in differentiable.items() if name in used}
    # .grad is read back from the leaves, the kept intermediates and backward's inputs=.
    watched = {**differentiable, **{n: intermediates[n] for n in options.retain_grad}, **targets}
    plan = PassPlan(
        options.mode, output, _grad_output(options.grad_output, output, computation.seed, computation.strict_output),
        targets, watched,
        options.retain_graph, options.create_graph, options.repeat, options.zero_grad,
        explicit_targets=bool(options.wrt),
    )
    # --symbolic sets each formula's value beside the gradient the hooks saw.
    recorder = FlowRecorder(graph.objects) if options.flow or options.symbolic else None
    if recorder is not None:
        with recorder:
            records, live = run_passes(plan, before_pass=recorder.start_pass)
    else:
        records, live = run_passes(plan)
    if computation.explain is not None:
        for record in records:
            if record.error is not None:
                record.error = computation.explain(record.error, graph)
    node_of = {id(obj): node_id for node_id, obj in graph.objects.items()}
    kept = {name: "kept by --retain-grad" for name in options.retain_grad}
    if options.mode == "backward" and options.wrt:
        kept.update({name: "written by backward(inputs=...) for --wrt" for name in targets if name not in kept})
    result = TraceResult(
        expression=computation.description,
        result=described(output),
        leaves=[_leaf(name, t, computation.sources[name], computation.strict_output) for name, t in leaves.items()],
        graph=graph,
        passes=[_plain_pass(r) for r in records],
        intermediates=[_intermediate(name, t, node_of, kept.get(name)) for name, t in intermediates.items()],
        seed=computation.seed if _drew_random(computation, options.grad_output) else None,
        options={**asdict(options), "wrt": list(targets), "retain_grad": list(options.retain_grad)},
        skipped_passes=options.repeat - len(records),
    )
    if recorder is not None and options.flow:
        result.flow = plain_steps(recorder.steps)
        result.nonfinite_origin = recorder.origin()
    if computation.found is not None:
        _describe_code(result, computation)
    if options.create_graph:
        result.gradient_graphs = _gradient_graphs(live, named, leaves, graph, computation.origin_of)
    if options.symbolic:
        from ..chain.rule import chain_rule

        steps = plain_steps(recorder.steps) if recorder is not None else None
        seconds = {g.of: g.second for g in result.gradient_graphs if g.second is not None}
        result.symbolic = chain_rule(
            computation.details["prepared"], computation.details["applications"], computation.bindings, graph,
            steps, output, options.grad_output, seconds, live if options.create_graph else None,
            {g.of: {id(obj): node_id for node_id, obj in g.graph.objects.items()} for g in result.gradient_graphs},
        )
    return result


def _cause(target: Any, settings: Any, source: str, *, cancellation: bool = False) -> Any:
    """Why a gradient is not finite, found on a fresh build of the same target (same values and
    seed, a gradient of ones at the output) by the node-level reasoning `check` uses; a code
    target's nodes are named by their source line. With `cancellation`, where a finite
    gradient lost its digits instead (verify/cancellation.py)."""
    from ..verify.run_causes import explain_cancellation, explain_nonfinite

    origins: list[Any] = []  # the fresh build's origin_of

    def run() -> tuple[Any, dict[str, Any]]:
        built = target.build(settings)
        origins.append(built.origin_of)
        return built.output, {n: t for n, t in built.leaves.items() if t.requires_grad}

    def line_of(grad_fn: Any) -> str | None:
        origin = origins[0](grad_fn) if origins else None
        if origin is None or origin.file is None:
            return None
        return f"{origin.file.rsplit('/', 1)[-1]}:{origin.line}: {origin.code or ''}".rstrip()

    explain = explain_cancellation if cancellation else explain_nonfinite
    return explain(run, None, source=source, origin_of=line_of)


def _describe_code(result: TraceResult, computation: Computation) -> None:
    result.target = {"kind": computation.kind, "name": computation.description, "found": computation.found}
    result.modules = computation.details.get("modules")
    recording = computation.details.get("recording")
    event = getattr(recording, "nonfinite", None)
    if event is not None and result.flow is not None:
        origin = event.origin
        result.forward_nonfinite = {
            "call": event.call, "node": event.detail.get("node"), "shape": event.detail.get("shape"),
            "module": origin.module, "module_class": origin.module_class, "file": origin.file,
            "line": origin.line, "code": origin.code,
        }


def _check_options(mode: str, repeat: int) -> None:
    if mode not in MODES:
        raise UsageError(f"unknown --mode '{mode}'", hint="choose backward or grad")
    if repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if repeat > MAX_REPEAT:
        raise LimitError(f"--repeat {repeat} is more than the limit of {MAX_REPEAT} passes")


def _differentiable_output(output: Any, leaves: dict[str, Any], strict: bool = True) -> Any:
    import torch

    if not isinstance(output, torch.Tensor):
        raise UsageError(
            "the output is a plain number: it does not depend on any variable, so there is no graph",
            hint="use a variable in the last statement, e.g. x*2",
        )
    integers = [name for name, t in leaves.items() if not _floating(t)]
    if strict and not output.requires_grad and integers and len(integers) == len(leaves):
        raise UsageError(
            f"the output does not require grad: {', '.join(integers)} "
            f"{'holds' if len(integers) == 1 else 'hold'} integers (randint), data without a gradient",
            hint="give a float variable to differentiate, e.g. --var 'w=randn(4)'",
        )
    if not output.requires_grad and strict:
        raise UsageError(
            "the output does not require grad: no differentiable operation connects it to a variable",
            hint="comparisons and where(...)'s condition have no gradient; trace an expression of the variables",
        )
    return output


def _floating(tensor: Any) -> bool:
    return tensor.is_floating_point() or tensor.is_complex()


def _refuse_integer_targets(wrt: Sequence[str], leaves: dict[str, Any]) -> None:
    for name in wrt:
        tensor = leaves.get(name)
        if tensor is not None and not _floating(tensor):
            raise UsageError(
                f"--wrt {name}: '{name}' holds integers (randint), data without a gradient",
                hint="differentiate with respect to a float variable",
            )


def _known(name: str, tensors: dict[str, Any], option: str, what: str) -> Any:
    if name not in tensors:
        raise UsageError(
            f"{option} {name}: '{name}' is not {what} of the expression",
            hint="names here: " + (", ".join(tensors) or "(none)"),
        )
    return tensors[name]


def _drew_random(computation: Computation, grad_output: str | None) -> bool:
    """Whether a leaf or the starting gradient drew random numbers, so the seed matters."""
    if grad_output is not None and grad_output.strip() != "ones":
        return parse_spec("grad-output", grad_output).random or computation.drew_random
    return computation.drew_random


def _grad_output(spec: str | None, output: Any, seed: int, strict: bool = True) -> Any:
    """The starting gradient: None for a scalar output, `ones`, or a --var style SPEC.
    Without `strict`, a non-scalar output without SPEC is left to backward to refuse."""
    import torch

    shape = list(output.shape)
    if spec is None:
        if strict and (output.numel() != 1 or output.dim() != 0):
            raise UsageError(
                f"the output has shape {shape}, not a scalar, so backward needs a starting gradient",
                hint="add --grad-output ones (a gradient of ones), or reduce the output, e.g. (...).sum()",
            )
        return None
    if spec.strip() == "ones":
        return torch.ones_like(output).detach()
    parsed = parse_spec("grad-output", spec)
    if parsed.integer:
        raise UsageError("--grad-output holds a gradient, so its values are floats, not integers (randint)",
                         hint="e.g. --grad-output ones or --grad-output 'randn(3)'")
    generator = torch.Generator().manual_seed(seed + 1)
    tensor = make_tensor(parsed, dtype=output.dtype, device=output.device, generator=generator).detach()
    if list(tensor.shape) != shape:
        raise UsageError(
            f"--grad-output has shape {list(tensor.shape)} but the output has shape {shape}",
            hint="the starting gradient needs the output's exact shape; --grad-output ones always fits",
        )
    return tensor


#: Code targets: a leaf (or its gradient) above this many elements is kept as a summary.
FULL_VALUES = 10_000


def _leaf(name: str, tensor: Any, source: LeafSource, whole: bool = True) -> Leaf:
    """`whole`: every value (expressions); else large tensors (a model's weights) summarised."""
    grad = tensor.grad
    return Leaf(
        name, source.spec, source.defaulted, list(tensor.shape), dtype_name(tensor),
        tensor.requires_grad, _values(tensor, whole), None if grad is None else _values(grad, whole),
    )


def _values(tensor: Any, whole: bool) -> Any:
    if whole or tensor.numel() <= FULL_VALUES:
        return full_value(tensor)
    data = summary(tensor)
    data["norm"] = float(tensor.detach().double().norm())
    return data


def _intermediate(name: str, tensor: Any, node_of: dict[int, str], kept: str | None) -> Intermediate:
    grad = current_grad(tensor) if kept else None
    return Intermediate(
        name, node_of.get(id(tensor.grad_fn)), kept is not None, None if grad is None else full_value(grad),
        kept or nonleaf_note(name),
    )


def _plain_pass(record: Any) -> Pass:
    return Pass(
        record.index, record.mode, record.retain_graph, record.create_graph,
        {name: None if g is None else full_value(g) for name, g in record.grads.items()},
        dict(record.grad_fns), record.nonfinite, record.error, record.warnings,
    )


def _gradient_graphs(
    live: dict[str, Any], named: dict[str, Any], leaf_tensors: dict[str, Any], traced: Graph, origin_of: OriginOf,
) -> list[GradientGraph]:
    graphs = []
    for name, gradient in live.items():
        if gradient is None:
            continue
        graph = walk_graph(
            gradient.grad_fn, leaf_names=leaf_ids(leaf_tensors), prefix=f"d{name}_n", known=traced,
            origin_of=origin_of,
        )
        second, note = second_derivative(gradient, named[name])
        graphs.append(GradientGraph(name, graph, None if second is None else full_value(second), note))
    return graphs
