"""The user's own code as a Target: an nn.Module (class, factory or instance) or a function.

`CodeTarget.build` makes the model from the one record of the model options (spec.py's
ModelSpec, with trace's --seed, --dtype and --device), as the model commands do
(construct.py's `made`: `--init KEY=VALUE`, Python literals read with `ast.literal_eval`;
model.py's `seeded`), binds forward's (or the function's) parameters to `--var` values or to
values given from Python, runs the call under the `ForwardRecorder`, and reduces the output
with `--loss` when one is given. The leaves are the module's parameters, named by their path
(`encoder.layers.0.linear1.weight`), and the tensor inputs: data unless `--wrt` names them
(a function's floating inputs require grad, as an expression's variables do).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any, Sequence

from ..errors import UsageError
from ..graph.nodes import is_accumulate, visits
from .diagnose import CodeExplainer
from .base import BuildSettings, Computation, LeafSource, Origin
from .inputs import bind_inputs
from .construct import describe, made, seeded
from .load import load_object, users_code
from .loss import as_loss
from .outputs import name_outputs, reduce_output
from .record import ORIGIN_KEY, ForwardRecorder, Recording, origin_of
from .spec import ModelSpec


@dataclass(frozen=True)
class CodeTarget:
    """`path.py:NAME`, `package.module:NAME` (`spec.target`), or the object itself (from the
    Python API, with its input values)."""

    spec: ModelSpec = ModelSpec("")  # TARGET, --var, --init, --loss, --loss-init, --library
    obj: Any = None  # the object; None: load `spec.target`
    values: Sequence[Any] = ()  # positional inputs given from Python
    named_values: dict[str, Any] = field(default_factory=dict)

    def build(self, settings: BuildSettings) -> Computation:
        # trace's --seed, --dtype and --device hold for an expression too: they come as settings
        spec = replace(self.spec, seed=settings.seed, dtype=settings.dtype, device=settings.device)
        obj, where = (self.obj, spec.target or describe(self.obj)) if self.obj is not None else load_object(spec.target)
        loss = as_loss(spec.loss, spec.loss_init, spec.library_dirs)
        # The seed also drives the model's initialisation and forward's randomness (dropout),
        # on a copy of torch's RNG state, so --seed repeats the whole run.
        with seeded(spec.seed) as seed:
            callee = made(obj, where, spec.init, dtype=spec.dtype, device=spec.device)
            model = callee.model
            inputs = bind_inputs(
                callee.signature_of, where, spec.var, self.values, self.named_values,
                dtype=_input_dtype(model, settings), device=settings.device, seed=seed,
                wrt=settings.wrt, data_inputs=model is not None, loss_names=loss.names() if loss else (),
                probe=callee.run if model is not None else None,
            )
            names = {id(m): path for path, m in model.named_modules()} if model is not None else {}
            recorder = ForwardRecorder(names, watch_nonfinite=settings.watch_forward)
            with users_code(where), recorder:
                output = callee.run(*inputs.args, **inputs.kwargs)
        outputs = name_outputs(output, where)
        loss_inputs = {name: t for name, t in inputs.tensors.items()}
        if loss is None:
            loss_value, loss_bindings = reduce_output(outputs, loss_inputs, None)
        else:
            loss_value, loss_bindings = loss.apply(output, outputs, loss_inputs)
        if loss is not None and not loss.is_code and getattr(loss_value, "grad_fn", None) is not None:
            tag_loss(loss_value.grad_fn, loss.given, forward=[t.grad_fn for t in outputs.values()])
        parameters = dict(model.named_parameters()) if model is not None else {}
        clash = set(parameters) & set(inputs.tensors)
        if clash:
            raise UsageError(f"the input '{sorted(clash)[0]}' has the name of a parameter", hint="rename the input in forward's signature")
        leaves = {**parameters, **inputs.tensors}
        owners = _owners(model)
        sources = {name: LeafSource(f"parameter of {_module_words(*owners.get(name, ('', '?')))}") for name in parameters}
        sources.update({name: LeafSource(inputs.specs[name], name in inputs.defaulted) for name in inputs.tensors})
        return Computation(
            kind="module" if model is not None else "function",
            description=where,
            leaves=leaves,
            sources=sources,
            output=loss_value,
            bindings=[*outputs.items(), *loss_bindings],
            seed=inputs.seed,
            origin_of=_CodeOrigins(parameters, owners),
            found=inputs.described(callee.found),
            strict_output=False,
            explain=CodeExplainer(recorder.recording, list(getattr(loss_value, "shape", [])), list(outputs)),
            details={
                "recording": recorder.recording,
                "modules": _module_table(model, recorder.recording),
                "outputs": list(outputs),
                "loss": None if loss is None else loss.where,
            },
            keep_alive=[model, output],
        )


def _input_dtype(model: Any, settings: BuildSettings) -> str:
    if settings.dtype is not None:
        return settings.dtype
    if model is not None:
        for tensor in chain(model.parameters(), model.buffers()):
            if tensor.is_floating_point():
                return str(tensor.dtype).removeprefix("torch.")
        return "float32"
    return "float64"


def _owners(model: Any) -> dict[str, tuple[str, str]]:
    """parameter name -> (its module's path, the module's class)."""
    if model is None:
        return {}
    owners = {}
    for path, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            owners[f"{path}.{name}" if path else name] = (path, type(module).__name__)
    return owners


def _module_words(path: str, cls: str) -> str:
    return f"{path} ({cls})" if path else cls


def _module_table(model: Any, recording: Recording) -> list[dict[str, Any]]:
    """Every module of the model, in definition order: path, class, parameters, shapes."""
    if model is None:
        return [
            {"path": run.path, "class": run.cls, "parameters": None, "inputs": run.inputs, "output": run.output}
            for run in recording.modules.values()
        ]
    sizes = _parameter_sizes(model)
    table = []
    for path, module in model.named_modules():
        run = recording.modules.get(path)
        table.append({
            "path": path, "class": type(module).__name__, "parameters": sizes.get(path, 0),
            "inputs": run.inputs if run else [], "output": run.output if run else [],
        })
    return table


def _parameter_sizes(model: Any) -> dict[str, int]:
    """module path -> the elements of `module.parameters()` (a parameter held twice in one
    module's tree counted once), from one walk of the model's parameters: asking each module
    walked its whole subtree again (bench/model.py's DeepMLP: 21 of 202 Python calls a graph node)."""
    seen: dict[str, set[int]] = {}
    sizes: dict[str, int] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        path = name.rpartition(".")[0]
        while True:  # the parameter's module and each module above it
            ids = seen.setdefault(path, set())
            if id(parameter) not in ids:
                ids.add(id(parameter))
                sizes[path] = sizes.get(path, 0) + parameter.numel()
            if not path:
                break
            path = path.rpartition(".")[0]
    return sizes


def tag_loss(root: Any, loss: str, forward: Sequence[Any] = ()) -> None:
    """Give the nodes --loss built an Origin: their span in the --loss text; a node made inside
    one call (cross_entropy's LogSoftmaxBackward0) gets the span of the call that made it.
    The walk stops at `forward`, the output's nodes: a Function called as the target has no
    line of the user's that made its node, and it is not the loss's either."""
    from ..interpret.to_torch import SPAN_KEY

    lines = loss.splitlines()
    made_by_forward = {id(node) for node in forward if node is not None}

    def the_loss(node: Any) -> bool:  # not forward's own node (tagged by the recorder, or not), nor a leaf
        return ORIGIN_KEY not in node.metadata and not is_accumulate(node) and id(node) not in made_by_forward

    parents: dict[int, Origin | None] = {}  # a node without a span of its own: its caller's
    for node, edges in visits(root, enter=the_loss):
        metadata = node.metadata
        span = metadata.get(SPAN_KEY)
        if span is not None:
            code = lines[span.line - 1].strip() if 0 < span.line <= len(lines) else None
            origin = Origin(span=span, file="--loss", line=span.line, code=code)
        else:
            origin = parents.get(id(node))
        if origin is not None:
            metadata[ORIGIN_KEY] = origin
        for fn, _ in edges:
            if fn is not None:
                parents.setdefault(id(fn), origin)


class _CodeOrigins:
    """origin_of for code: the tag the recorder or tag_loss wrote, or a parameter's module."""

    def __init__(self, parameters: dict[str, Any], owners: dict[str, tuple[str, str]]) -> None:
        self.by_leaf = {
            id(tensor): Origin(module=owners[name][0], module_class=owners[name][1])
            for name, tensor in parameters.items() if name in owners
        }
        self.keep = list(parameters.values())

    def __call__(self, grad_fn: Any) -> Origin | None:
        origin = origin_of(grad_fn)
        if origin is not None:
            return origin
        variable = getattr(grad_fn, "variable", None)
        return None if variable is None else self.by_leaf.get(id(variable))
