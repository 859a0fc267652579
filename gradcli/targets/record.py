"""Watching the user's forward run: which module and which line of their code made each node.

A `TorchFunctionMode` sees every torch call the user's code makes (functions, Tensor methods
and operators; torch's own calls inside a handled call are not seen again), and modules.py's
hooks keep the stack of modules running. For each call the recorder walks the
Python frames up to the first one in the user's own files: that line, and the innermost
module running, are the node's `Origin`, written into `grad_fn.metadata`. Nodes a single
call creates internally (cross_entropy's LogSoftmaxBackward0 under its NllLossBackward0)
get the same origin: the nearest user line.

This was chosen over anomaly mode's `metadata["traceback_"]`, which formats the whole stack
for every node (see bench/README.md for the measured cost). The same pass notes what later
diagnoses need: in-place modifications, the calls that cut the graph (detach, `.data`,
`.item()`, no_grad, integer results), the first non-finite forward output, and each
module's input and output shapes.
"""

from __future__ import annotations

import importlib.util
import linecache
import os
import re
import sys
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..graph.nodes import inputs_of, is_accumulate, walk
from .base import Origin
from .flatten import leaves
from .load import is_user_file
from .modules import ModuleHooks, ModuleRun

#: A trailing comment, written PEP 8's way (two spaces, then #): left out of a node's code.
_COMMENT = re.compile(r"\s{2,}#.*$")
#: gradcli's own folder: frames from here are the recorder's, or gradcli calling the model.
_HERE = str(Path(__file__).resolve().parent.parent) + "/"
#: Where the recorder writes a node's Origin in `grad_fn.metadata`.
ORIGIN_KEY = "gradcli_origin"


@dataclass
class Event:
    """One noteworthy call in forward: what it was, where, and on what."""

    call: str
    origin: Origin
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Recording:
    """What forward left behind besides its output."""

    inplace: list[Event] = field(default_factory=list)  # in-place calls on tensors with a graph
    cuts: list[Event] = field(default_factory=list)  # calls whose result left the graph
    nonfinite: Event | None = None  # the first call whose output held nan or inf (when watched)
    first_nan: Event | None = None  # the first call whose output held a nan (where a nan is born)
    modules: dict[str, ModuleRun] = field(default_factory=dict)


def origin_of(grad_fn: Any) -> Origin | None:
    """The Origin the recorder wrote on a node."""
    return grad_fn.metadata.get(ORIGIN_KEY)


class ForwardRecorder:
    """Use as a context manager around the user's forward; `names` maps id(module) -> path."""

    def __init__(self, names: dict[int, str], *, watch_nonfinite: bool = False) -> None:
        self.names = names
        self.watch_nonfinite = watch_nonfinite
        self.recording = Recording()
        self._modules = ModuleHooks(names=names, enter=self._enter_module, leave=self._leave_module,
                                    unknown=lambda module: f"({type(module).__name__})")
        self._origins: dict[tuple[Any, ...], Origin] = {}
        self._code: dict[tuple[str, int], str] = {}  # (file, line) -> the line's code
        self._mode: Any = None

    # -- entering and leaving ----------------------------------------------------------------
    def __enter__(self) -> "ForwardRecorder":
        import torch

        self._modules.__enter__()
        self._tensor = torch.Tensor
        # The module hooks run inside the mode: each `t.shape` they read would reach the mode as
        # a call of its own (9,918 of the 12,119 calls on bench/model.py, ~0.09 s), heard by
        # the listener as if the user's code had made it. They read with the mode off instead.
        self._unwatched = torch._C.DisableTorchFunction
        # `x.data` reaches the mode as a fresh method-wrapper of this descriptor's __get__.
        self._data = torch._C.TensorBase.__dict__["data"]
        self._mode = watching(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        self._modules.__exit__(*exc)

    def _enter_module(self, path: str, module: Any, args: Any) -> None:
        if path not in self.recording.modules:
            with self._unwatched():
                shapes = _shapes(args)
            self.recording.modules[path] = ModuleRun(path, type(module).__name__, shapes, [])

    def _leave_module(self, path: str, module: Any, args: Any, output: Any) -> None:
        run = self.recording.modules.get(path)
        if run is not None and not run.output:
            with self._unwatched():
                run.output = _shapes(output)

    # -- every torch call --------------------------------------------------------------------
    def origin(self) -> Origin:
        """The innermost running module and the nearest frame in the user's own files."""
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_HERE):  # the recorder
            frame = frame.f_back  # type: ignore[assignment]
        while frame is not None and not is_user_file(frame.f_code.co_filename):
            if frame.f_code.co_filename.startswith(_HERE):
                frame = None  # back in gradcli, which called the model: no user line in between
                break
            frame = frame.f_back  # type: ignore[assignment]
        module = self._modules.current
        cls = self.recording.modules[module].cls if module is not None else None
        file, line = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else (None, None)
        key = (module, file, line)
        origin = self._origins.get(key)
        if origin is None:
            code = self._code.get((file, line)) if file else None
            if file and code is None:
                code = self._code[(file, line)] = _COMMENT.sub("", linecache.getline(file, line)).strip()
            origin = self._origins[key] = Origin(module=module, module_class=cls, file=file, line=line, code=code or None)
        return origin

    def called(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any, before: Any) -> None:
        """After `func` ran: tag the nodes it made; note cuts, in-place calls, non-finite output."""
        tensor_type = self._tensor
        # Most calls return one tensor; property reads (x.shape) return no tensor at all.
        tensors = [result] if isinstance(result, tensor_type) else [t for t in leaves(result) if isinstance(t, tensor_type)]
        name = getattr(func, "__name__", "")
        if not tensors and before is None and name not in _TO_PYTHON:
            return
        origin: Origin | None = None
        for tensor in tensors:
            grad_fn = tensor.grad_fn
            if grad_fn is not None and ORIGIN_KEY not in grad_fn.metadata:
                origin = origin or self.origin()
                _tag(grad_fn, origin)
        filled = None  # an in-place fill's target: finite before the call (it holds the constant after)
        if before is not None:  # an in-place call on a tensor that had a graph node
            filled = before.pop("filled_finite", None)
            origin = origin or self.origin()
            self.recording.inplace.append(Event(name, origin, before))
        if (tensors or name in _TO_PYTHON) and not any(t.requires_grad for t in tensors):
            if any(isinstance(a, self._tensor) and a.requires_grad for a in leaves(args)):
                if getattr(func, "__self__", None) is self._data or not name.startswith("__") or name in _TO_PYTHON:
                    self._cut(func, name, tensors, result, origin)
        if self.watch_nonfinite and self.recording.first_nan is None:
            self._check_finite(name, tensors, origin, args, kwargs, filled)

    def _cut(self, func: Any, name: str, tensors: list[Any], result: Any, origin: Origin | None) -> None:
        import torch

        if getattr(func, "__self__", None) is self._data:
            how = ".data"
        elif not torch.is_grad_enabled():
            how = "torch.no_grad()"
        elif name == "detach":
            how = "detach()"
        elif not tensors:
            how = f"{name}()"  # .item(), .tolist(): a Python value
        elif not any(t.is_floating_point() or t.is_complex() for t in tensors):
            how = f"{name}() (an integer result)"
        else:
            how = f"{name}()"
        self.recording.cuts.append(Event(name, origin or self.origin(), {"how": how}))

    def _check_finite(self, name: str, tensors: list[Any], origin: Origin | None, args: tuple[Any, ...],
                      kwargs: dict[str, Any], filled: bool | None) -> None:
        """The first non-finite output (nan or inf), and apart the first nan: an inf the user
        wrote (masked_fill(m, -inf)) is no overflow, and the nan may be born later (softmax of
        a row that is -inf throughout): nonfinite_calls.py."""
        import torch

        from .nonfinite_calls import masked_rows, written_nonfinite

        for tensor in tensors:
            if not (tensor.is_floating_point() or tensor.is_complex()) or bool(torch.isfinite(tensor.detach()).all()):
                continue
            nan = bool(torch.isnan(tensor.detach()).any())
            node = tensor.grad_fn.name() if tensor.grad_fn is not None else None
            detail: dict[str, Any] = {"node": node, "shape": list(tensor.shape), "kind": "nan" if nan else "inf",
                                      "dtype": str(tensor.dtype).replace("torch.", ""),
                                      "written": not nan and written_nonfinite(name, [*args, *kwargs.values()], filled)}
            if nan:
                rows = masked_rows(name, args, kwargs, tensor.detach())
                if rows is not None:
                    detail["masked_rows"], detail["rows"] = rows.rows, rows.total
            event = Event(name, origin or self.origin(), detail)
            if self.recording.nonfinite is None:
                self.recording.nonfinite = event
            if nan:
                self.recording.first_nan = event
            return

    def before(self, func: Any, args: tuple[Any, ...]) -> Any:
        """What an in-place call is about to modify, while it still has its old node (and, for
        a fill, whether it was finite: after it, it holds the constant)."""
        name = getattr(func, "__name__", "")
        if not name.endswith("_") or name.endswith("__") or not args or not isinstance(args[0], self._tensor):
            return None
        target = args[0]
        grad_fn = target.grad_fn
        found = {
            "node": grad_fn.name() if grad_fn is not None else None,
            "leaf": grad_fn is None and target.requires_grad,
            "shape": list(target.shape),
            "version": target._version + 1,
        }
        if self.watch_nonfinite:
            import torch

            from .nonfinite_calls import FILLS

            if name in FILLS:  # (taken back out by `called`, for _check_finite)
                found["filled_finite"] = not target.is_floating_point() or bool(torch.isfinite(target.detach()).all())
        return found


#: Calls that turn a tensor into Python values: the graph cannot follow them.
_TO_PYTHON = frozenset({"item", "tolist", "numpy", "__float__", "__int__", "__index__"})


def _tag(grad_fn: Any, origin: Origin) -> None:
    """Tag grad_fn (untagged) and the untagged nodes behind it that the same call made."""
    grad_fn.metadata[ORIGIN_KEY] = origin
    # Most calls make one node, whose inputs are tagged already or leaves: walk only when not.
    made = [fn for fn in inputs_of(grad_fn) if fn is not None and _untagged(fn)]
    if made:
        for node in walk(made, enter=_untagged):
            node.metadata[ORIGIN_KEY] = origin


def _untagged(node: Any) -> bool:
    return not is_accumulate(node) and ORIGIN_KEY not in node.metadata


def _shapes(value: Any) -> list[list[int]]:
    return [list(t.shape) for t in leaves(value) if hasattr(t, "shape") and hasattr(t, "grad_fn")]


class Listener(Protocol):
    """What watches torch calls through `watching`: told before and after each call."""

    def before(self, func: Any, args: tuple[Any, ...]) -> Any: ...

    def called(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any, before: Any) -> None: ...


def watching(listener: Listener) -> Any:
    """The TorchFunctionMode that tells `listener` of every torch call (enter it with `with`).

    The one TorchFunctionMode of gradcli (tests/targets/test_recorder.py holds it to that): the forward
    recorder here, grads' observer (health/observe.py) and the cause finder's call log
    (graph/evidence.py) all listen through it, so a torch version that changes how modes see
    calls is handled in one place."""
    global _MODE
    if _MODE is None:
        _MODE = _mode_class()
    return _MODE(listener)


def _mode_class() -> type:
    from torch.overrides import TorchFunctionMode

    class Mode(TorchFunctionMode):
        def __init__(self, listener: Listener) -> None:
            super().__init__()
            self.listener = listener

        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            before = self.listener.before(func, args)
            result = func(*args, **kwargs)
            self.listener.called(func, args, kwargs, result, before)
            return result

    return Mode


_MODE: Any = None


def user_line(depth: int = 0) -> Origin | None:
    """The innermost frame of the user's code above the caller of this function's caller
    (plus `depth` more frames), walking out through torch; None when gradcli comes first (an
    operation gradcli itself ran, such as a --loss expression in its language). Looked up
    only when something worth naming happened, never for every operation."""
    frame = sys._getframe(depth + 2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_GRADCLI_DIR):
            return None
        if not filename.startswith(_TORCH_DIR) and not filename.startswith("<frozen"):
            code = linecache.getline(filename, frame.f_lineno).strip()
            return Origin(file=filename, line=frame.f_lineno, code=code)
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _folder(origin: str) -> str:
    return os.path.dirname(os.path.abspath(origin)) + os.sep


# As Python names the frames' files (not resolved): where torch and gradcli are, found
# without importing torch.
_TORCH_DIR = _folder(importlib.util.find_spec("torch").origin)  # type: ignore[arg-type]
_GRADCLI_DIR = os.path.dirname(_folder(__file__).rstrip(os.sep)) + os.sep
