"""`trace`: build an expression, walk its autograd graph, run backward passes, follow the flow.

This is the library behind `gradcli trace`; it returns plain data (`TraceResult`) that the
rich, JSON and DOT renderers read, and raises `GradcliError` for input it refuses:

    >>> from gradcli import trace
    >>> result = trace("x.pow(2).sum()", ["x=[1.0, 2.0]"])
    >>> result.leaves[0].grad
    [2.0, 4.0]

The graph is walked once, before any pass, so saved tensors are read while they exist.
The result's records are tracing/result.py's, the options and refusals tracing/options.py's.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from .._quiet_gc import paused_gc
from ..errors import UsageError
from ..targets.base import BuildSettings, Computation, OriginOf
from ..targets.expression import ExpressionTarget
from ..targets.resolve import as_target
from ..graph.flow import FlowRecorder, plain_steps
from ..graph.walk import Graph, Labels, leaf_ids, walk_graph
from ..graph.passes import PassPlan, names_with_grad, run_passes, second_derivative
from .options import (
    TraceOptions, check_options, differentiable_output, drew_random, known, refuse_integer_targets,
    starting_gradient,
)
from .result import FULL_VALUES, GradientGraph, TraceResult, intermediate_record, leaf_record, pass_record
from ..graph.values import described, full_value


def trace(
    target: Any,
    *inputs: Any,
    loss: Any = None,
    init: Sequence[str] = (),
    seed: int | None = None,
    library_dirs: Sequence[str | Path] = (),
    loss_init: Sequence[str] = (),
    **options: Any,
) -> TraceResult:
    """Trace `target` and return what `gradcli trace` renders.

    `target` is an expression's text with its `--var` texts as `inputs` (one list of them:
    `trace("x*x", ["x=2.0"])`, or a dict by name: `trace("x*x", {"x": 2.0})`); code named as `"model.py:NAME"` or `"package.module:NAME"`
    (inputs: `--var` texts; `init`: `--init KEY=VALUE` texts); an nn.Module, a function or an
    autograd.Function called with `inputs` (tensors; other keywords are inputs by name, for
    forward or for `loss`); or a `Target`. `loss` reduces a code
    target's output: an expression (`"cross_entropy(out.logits.flatten(0, 1), y.flatten())"`),
    your own loss as `"losses.py:NAME"` / `"torch.nn:CrossEntropyLoss"` (with `loss_init`:
    `--loss-init KEY=VALUE` texts), or a callable `loss(out, **inputs it names)`. Keyword options as in TraceOptions
    (mode, wrt, grad_output, retain_graph, create_graph, repeat, zero_grad, retain_grad, flow,
    dtype, device, symbolic); see `gradcli trace --help`."""
    for key in ("wrt", "retain_grad"):
        if key in options:
            options[key] = tuple(options[key])
    # Other keywords name a code target's inputs (forward's, or --loss's: labels=...).
    named = {key: options.pop(key) for key in list(options) if key not in _OPTION_NAMES}
    chosen = TraceOptions(**options)
    check_options(chosen.mode, chosen.repeat)
    target = as_target(target, inputs, named, loss=loss, init=init, library_dirs=library_dirs, loss_init=loss_init)
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
    output = differentiable_output(computation.output, computation.leaves, strict=computation.strict_output)
    leaves = computation.leaves
    named = names_with_grad([*leaves.items(), *computation.bindings])
    intermediates = {name: t for name, t in named.items() if name not in leaves and not t.is_leaf}
    for name in options.retain_grad:
        known(name, intermediates, "--retain-grad", "an assigned intermediate (h = ...)").retain_grad()
    graph = walk_graph(
        output.grad_fn, leaf_names=leaf_ids(leaves), labels=Labels(computation.bindings),
        origin_of=computation.origin_of,
    )
    differentiable = {name: t for name, t in leaves.items() if t.requires_grad}
    refuse_integer_targets(options.wrt, leaves)
    if options.wrt:
        targets = {name: known(name, named, "--wrt", "a variable or an assigned name") for name in options.wrt}
    else:
        used = {node.variable for node in graph.nodes if node.variable} or set(differentiable)
        targets = {name: t for name, t in differentiable.items() if name in used}
    # .grad is read back from the leaves, the kept intermediates and backward's inputs=.
    watched = {**differentiable, **{n: intermediates[n] for n in options.retain_grad}, **targets}
    plan = PassPlan(
        options.mode, output, starting_gradient(options.grad_output, output, computation.seed, computation.strict_output),
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
    whole, made = options.full_values, {}
    result = TraceResult(
        expression=computation.description,
        result=described(output, whole, FULL_VALUES),
        leaves=[leaf_record(name, t, computation.sources[name], whole, made) for name, t in leaves.items()],
        graph=graph,
        passes=[pass_record(r, whole, made) for r in records],
        intermediates=[intermediate_record(name, t, node_of, kept.get(name), whole) for name, t in intermediates.items()],
        seed=computation.seed if drew_random(computation, options.grad_output) else None,
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
    gradient lost its digits instead (verify/causes/cancellation.py)."""
    from ..verify.causes.run import explain_cancellation, explain_nonfinite

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
        result.forward_nonfinite = _event_data(event)
        nan = getattr(recording, "first_nan", None)
        result.forward_nonfinite["first_nan"] = None
        if nan is not None and nan is not event:
            result.forward_nonfinite["first_nan"] = {**_event_data(nan), "first_nan": None}


def _event_data(event: Any) -> dict[str, Any]:
    """A forward call that made a nan or inf: what, where, and (issue 24) whether it was a nan
    or an inf, whether the user wrote the inf as a constant, and a softmax's fully masked rows."""
    origin = event.origin
    return {
        "call": event.call, "node": event.detail.get("node"), "shape": event.detail.get("shape"),
        "module": origin.module, "module_class": origin.module_class, "file": origin.file,
        "line": origin.line, "code": origin.code, "kind": event.detail.get("kind"),
        "written": bool(event.detail.get("written")), "masked_rows": event.detail.get("masked_rows"),
    }


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
