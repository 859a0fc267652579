"""Watch a model's forward: which parameter each operation used first, where the graph was
cut, which modules ran, which activations output nothing but zeros.

A parameter that gets no gradient is only useful to report with its cause, and the cause is
visible in forward, not in the finished graph: the module never ran, or an operation took
a tensor that required grad and returned one that does not (`.detach()`, `.data`, an op
under `torch.no_grad()`, an integer result, `.item()`, `.numpy()`). targets/record.py's
TorchFunctionMode (gradcli's one) tells this observer of every torch function and Tensor
method call (the `.data` getter included) with its arguments and result, which is exactly
that evidence; module hooks give each module's span of operations. The user's lines (the
one `Origin` type) are looked up only for cuts and dead activations.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy
import torch
from ..targets.base import Origin
from ..targets.flatten import tensors_in
from ..targets.modules import ModuleHooks, ModuleRun
from ..targets.record import user_line, watching

CutKind = Literal["no_grad", "detach", "data", "numpy", "item", "integer", "other"]

#: Activations whose output is exactly zero wherever their gradient is: a layer whose
#: activation outputs only zeros passes no gradient back, and the next layer sees zeros.
ZEROING_ACTIVATIONS = frozenset({"relu", "relu_", "relu6", "hardtanh", "hardtanh_", "threshold", "threshold_"})
#: Activations whose gradient is exactly zero where the output reaches its bound in floating
#: point (sigmoid(20.0) is 1.0 in float32, and s * (1 - s) = 0): saturated, not dead.
SATURATING_ACTIVATIONS = {"sigmoid": "0 and 1", "sigmoid_": "0 and 1", "tanh": "-1 and 1", "tanh_": "-1 and 1"}


@dataclass
class Cut:
    """An operation that took a tensor requiring grad and returned none that does."""

    index: int  # operation number in forward
    kind: CutKind
    op: str
    source: Origin | None
    module: str  # the innermost module running, "" for the model itself
    inputs: list[Any]  # the grad_fn nodes of its inputs, or parameter names for leaves


@dataclass
class Activation:
    """One run of a zeroing or saturating activation: stuck when no gradient can pass it (a
    relu whose every output is 0: dead; a sigmoid whose every output is 0 or 1: saturated)."""

    index: int
    op: str
    module: str
    stuck: bool
    state: str = ""  # "dead (outputs only zeros)", "saturated (outputs only 0 and 1)"
    zero_output: bool = False  # what it passes on is all zeros (the next layer's input)
    source: Origin | None = None


@dataclass
class ForwardRecord:
    """What forward showed, as plain data (the cuts hold graph nodes until analysed)."""

    first_use: dict[str, int] = field(default_factory=dict)  # parameter name -> op number
    cuts: list[Cut] = field(default_factory=list)
    activations: list[Activation] = field(default_factory=list)
    modules: dict[str, ModuleRun] = field(default_factory=dict)
    operations: int = 0


class ForwardObserver:
    """Use as `with ForwardObserver(model) as watch: out = model(*inputs)`; read `watch.record`."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._mode = watching(self)
        self.record = ForwardRecord()
        self._names = {id(p): name for name, p in model.named_parameters()}
        self._modules = ModuleHooks(names={id(m): path for path, m in model.named_modules()},
                                    enter=self._entering, leave=self._leaving)
        self._cut_outputs: dict[int, tuple[weakref.ref, Cut]] = {}

    def __enter__(self) -> "ForwardObserver":
        self._modules.__enter__()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        self._modules.__exit__(*exc)
        self._cut_outputs.clear()
        return self._mode.__exit__(*exc)

    def _entering(self, path: str, module: Any, args: Any) -> None:
        run = self.record.modules.get(path)
        if run is None:
            run = self.record.modules[path] = ModuleRun(path, type(module).__name__, first=self.record.operations + 1)
        run.calls += 1

    def _leaving(self, path: str, module: Any, args: Any, output: Any) -> None:
        self.record.modules[path].last = self.record.operations

    def before(self, func: Any, args: Any) -> None:
        return None

    def called(self, func: Any, args: Any, kwargs: dict[str, Any], out: Any, before: Any) -> None:
        """After `func` ran: first uses of parameters, cuts, stuck activations."""
        record = self.record
        record.operations += 1
        inputs = tensors_in((args, kwargs))
        if not inputs:
            return
        index = record.operations
        computes: bool | None = None  # reading .dtype or .shape is not a use: a result tensor is
        for tensor in inputs:
            name = self._names.get(id(tensor))
            if name is not None and name not in record.first_use:
                if computes is None:
                    computes = isinstance(out, torch.Tensor) or bool(tensors_in(out))
                if computes:
                    record.first_use[name] = index
        name = _op_name(func)
        if any(t.requires_grad for t in inputs):
            kind = _cut_kind(name, out)
            if kind is not None:
                self._cut(index, kind, name, inputs, out)
        elif isinstance(out, numpy.ndarray):
            self._numpy_after_cut(inputs)
        if (name in ZEROING_ACTIVATIONS or name in SATURATING_ACTIVATIONS) and isinstance(out, torch.Tensor) and out.numel():
            self._activation(index, name, out)

    def _activation(self, index: int, name: str, out: torch.Tensor) -> None:
        module = self._modules.current or ""
        if name in ZEROING_ACTIVATIONS:
            dead = not bool(out.any())
            activation = Activation(index, name, module, dead, "dead (outputs only zeros)", zero_output=dead)
        else:
            low = -1.0 if name.startswith("tanh") else 0.0
            saturated = bool(((out == low) | (out == 1.0)).all())
            activation = Activation(index, name, module, saturated, f"saturated (outputs only {SATURATING_ACTIVATIONS[name]})")
        if activation.stuck:
            activation.source = user_line(2)
        self.record.activations.append(activation)

    def _cut(self, index: int, kind: CutKind, name: str, inputs: list[torch.Tensor], out: Any) -> None:
        sources = []
        for tensor in inputs:
            if not tensor.requires_grad:
                continue
            if tensor.grad_fn is not None:
                sources.append(tensor.grad_fn)
            elif id(tensor) in self._names:
                sources.append(self._names[id(tensor)])
        cut = Cut(index, kind, name, user_line(2), self._modules.current or "", sources)
        self.record.cuts.append(cut)
        if isinstance(out, torch.Tensor):
            self._cut_outputs[id(out)] = (weakref.ref(out), cut)

    def _numpy_after_cut(self, inputs: list[torch.Tensor]) -> None:
        """`.detach().numpy()`: the detach was the cut, a numpy round trip its purpose."""
        for tensor in inputs:
            found = self._cut_outputs.get(id(tensor))
            if found is not None and found[0]() is tensor:
                found[1].kind = "numpy"


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    if name == "__get__":  # a property getter: Tensor.data, Tensor.T, ...
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    return name


def _cut_kind(name: str, out: Any) -> CutKind | None:
    """The kind of cut an operation is, given that an input required grad; None for none."""
    if name in ("item", "tolist"):
        return "item"
    if isinstance(out, numpy.ndarray):
        return "numpy"
    outputs = tensors_in(out)
    if not outputs or any(t.requires_grad for t in outputs):
        return None  # no tensor out (a shape, a dtype), or the gradient goes on
    if not torch.is_grad_enabled():
        return "no_grad"
    if name in ("detach", "detach_"):
        return "detach"
    if name == "data":
        return "data"
    if not any(t.is_floating_point() or t.is_complex() for t in outputs):
        return "integer"
    return "other"
