"""The hooks of one run of the script under one setup, in the child process (child.py).

As `gradcli watch` does, the script runs unchanged under torch's process-wide hooks: the
optimizer step pre-hook (the step's loss and gradients, before the update) and post-hook (the
parameters after it), and `torch.autograd.backward` wrapped (the loss backward ran on). The
model is found as watch finds it, the first module called outside any other with gradients
on; `nn.Module.__call__` is wrapped to see that call, and it is where the setup is applied:
the model compiled in place (`module.compile`), cast to float64, or run under autocast.

At every step one JSON line: the batch's hash (the model's first call in the step), the loss,
each parameter's gradient and value fingerprints (fingerprint.py). With `locate=k` the
computing modules are hooked from the first step (so that a compiled run is compiled with the
hooks it will have at step k) and, at step k only, each module's output and the gradients at
its two ends are fingerprinted, with the line that called it; then the run stops.

A step that `gradcli watch` would stop (a non-finite loss, or a non-finite gradient the loss
scale did not skip) ends the run before it is applied, with a `stop` line; the parent runs the
script again to that step under watch itself (child.py, `watch`) for watch's own stop record.
Each step's line says its wall time and the time spent in these hooks: the cost, measured.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from typing import Any, TextIO

import torch

from ..comparison.side import _cast, _first_floating, computing_modules
from ..targets.load import is_user_file
from ..targets.modules import ModuleHooks
from .fingerprint import batch_hash, summaries, summary
from .setups import RunSetup

#: The loss scale a float16 run starts from (GradScaler's own loop: halved at a step with a
#: non-finite gradient, which is then skipped). GradScaler's default, 65536, overflows float16's
#: largest number (65504) at once and skips every float16 run's first step.
INIT_SCALE = 2.0**12


class Enough(Exception):
    """The run reached its last step (--steps, or the located step): stop the script there."""


class Recorder:
    """Install with `with Recorder(setup, out):` around the script's run: one JSON line per step to `out`."""

    def __init__(self, setup: RunSetup, out: TextIO, *, steps: int | None = None, locate: int | None = None,
                 watched: bool = False) -> None:
        self.setup, self.out, self.steps, self.locate = setup, out, steps, locate
        self.watched = watched  # gradcli watch runs beside: it stops a non-finite step, not this
        self.step = 0  # optimizer steps done
        self.top: torch.nn.Module | None = None
        self.optimizer: int | None = None  # id of the optimizer whose steps are counted
        self.names: dict[int, str] = {}
        self.running = False
        self.batch: str | None = None
        self.loss: float | None = None
        self.scale = INIT_SCALE if setup.kind == "autocast" and setup.half == "float16" else None
        self.skipped = False
        self.grads: dict[str, list[float]] = {}
        self.grads_before_skip: dict[str, list[float]] = {}
        self.modules: dict[str, dict[str, Any]] = {}
        self.draws: bool | None = None
        self.nonfinite: dict[str, Any] | None = None  # (located) the first call whose output held nan or inf
        self._hooks: ModuleHooks | None = None
        self._handles: list[Any] = []
        self._spent = 0.0  # seconds in these hooks since the last step
        self._last = 0.0  # when the last step ended (perf_counter)

    # -- installing ------------------------------------------------------------------------
    def __enter__(self) -> "Recorder":
        from torch.optim import optimizer as optim_module

        if self.setup.kind == "deterministic":
            torch.use_deterministic_algorithms(True)
        self._call = torch.nn.Module.__call__
        self._backward = torch.autograd.backward
        recorder = self
        torch.nn.Module.__call__ = lambda module, *args, **kwargs: recorder._on_call(module, *args, **kwargs)  # type: ignore[method-assign]
        torch.autograd.backward = self._on_backward
        self._handles = [optim_module.register_optimizer_step_pre_hook(self._pre_step),
                         optim_module.register_optimizer_step_post_hook(self._post_step)]
        self._write({"kind": "start", "torch": torch.__version__, "python": sys.version.split()[0]})
        self._last = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.nn.Module.__call__ = self._call  # type: ignore[method-assign]
        torch.autograd.backward = self._backward
        for handle in self._handles:
            handle.remove()
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)

    # -- the model's calls ---------------------------------------------------------------------
    def _on_call(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if self.running or not torch.is_grad_enabled() or (self.top is not None and module is not self.top):
            return self._call(module, *args, **kwargs)
        if self.top is None:
            self._found(module)
        if self.batch is None:
            started = time.perf_counter()
            self.batch = batch_hash(args, kwargs)
            self._spent += time.perf_counter() - started
        if self.setup.kind == "float64":
            args, kwargs = _cast((args, kwargs), torch.float64)
        watching = self.locate is not None and self.step + 1 == self.locate
        before = torch.get_rng_state() if watching else None
        self.running = True
        recorder = self._recorder(watching)
        try:
            with recorder if recorder is not None else contextlib.nullcontext():
                if self.setup.kind == "autocast":
                    with torch.autocast("cpu", dtype=getattr(torch, self.setup.half or "bfloat16")):
                        return self._call(module, *args, **kwargs)
                return self._call(module, *args, **kwargs)
        finally:
            self.running = False
            if before is not None:
                self.draws = bool(self.draws) or not torch.equal(before, torch.get_rng_state())
            if recorder is not None and self.nonfinite is None:
                self.nonfinite = _event(recorder.recording.nonfinite)

    def _recorder(self, watching: bool) -> Any:
        """At the located step of an eager run, the one forward recorder, watching for the first
        non-finite output (its call, module and line). Not under torch.compile: a torch
        function mode would change what dynamo captures."""
        if not watching or self.setup.kind == "compile" or self.top is None:
            return None
        from ..targets.record import ForwardRecorder

        return ForwardRecorder({id(m): path for path, m in _unwrapped(self.top).named_modules()}, watch_nonfinite=True)

    def _found(self, module: torch.nn.Module) -> None:
        """The model: named, set up, and (locating) its computing modules hooked. A model
        wrapped by DDP is named by what it wraps (`fc1.weight`, not `module.fc1.weight`),
        as the same script run in one process names it."""
        self.top = module
        self.names = {id(p): name for name, p in _unwrapped(module).named_parameters()}
        if self.setup.kind == "float64":
            module.to(torch.float64)
        if self.locate is not None:
            self._hooks = ModuleHooks(modules=computing_modules(_unwrapped(module)), leave=self._leave, eager=True).__enter__()
        if self.setup.kind == "compile":
            module.compile(backend=self.setup.backend)

    def _leave(self, path: str, module: Any, args: Any, output: Any) -> None:
        if self.step + 1 != self.locate or path in self.modules:
            return
        entry = self.modules[path] = {"path": path, "cls": type(module).__name__, "output": None,
                                      "output_grad": None, "input_grad": None,
                                      "hooks": len(module._forward_hooks) + len(module._forward_pre_hooks) - 1,
                                      **_user_line()}
        out = _first_floating(output)
        if out is not None:
            entry["output"] = summary(out)
            if out.requires_grad:
                out.register_hook(lambda g, e=entry: e.__setitem__("output_grad", self._unscaled(g)))
        inp = _first_floating(args, needs_grad=True)
        if inp is not None:
            inp.register_hook(lambda g, e=entry: e.__setitem__("input_grad", self._unscaled(g)))

    def _unscaled(self, g: torch.Tensor) -> list[float]:
        return [x / self.scale for x in summary(g)] if self.scale else summary(g)

    # -- backward and the step -------------------------------------------------------------------
    def _on_backward(self, tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
            self.loss = float(tensors.detach())
            if self.scale is not None and grad_tensors is None:
                tensors = tensors * self.scale
        return self._backward(tensors, grad_tensors, *args, **kwargs)

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.optimizer is None:
            self.optimizer = id(optimizer)
        if id(optimizer) != self.optimizer:
            return
        started = time.perf_counter()
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if self.scale is not None:
            self.skipped = self._unscale(params)
        self.grads = self._fingerprints(params, grads=True)
        self._spent += time.perf_counter() - started
        if not self.watched:
            self._stop_if_nonfinite(optimizer)

    def _stop_if_nonfinite(self, optimizer: torch.optim.Optimizer) -> None:
        """A step watch would stop: its loss or a gradient it would apply is nan or inf. The run
        ends here, before the step is applied, as watch ends it."""
        bad = [name for name, (norm, _) in self.grads.items() if not math.isfinite(norm)]
        loss = _mean_over_ranks(self.loss)  # (under torchrun every rank decides alike)
        if not bad and (loss is None or math.isfinite(loss)):
            return
        self._write({"kind": "stop", "step": self.step + 1, "loss": loss,
                     "parameters": bad, "optimizer": type(optimizer).__name__})
        raise Enough

    def _unscale(self, params: list[torch.Tensor]) -> bool:
        """GradScaler's loop: unscale; a non-finite gradient skips the step (no gradient, no
        update) and halves the scale."""
        grads = [p.grad for p in params if p.grad is not None]
        for g in grads:
            g.div_(self.scale)
        finite = all(bool(torch.isfinite(g).all()) for g in grads)
        if not finite and self.watched and self.loss is not None and not math.isfinite(self.loss):
            return False  # a non-finite loss is watch's stop under a GradScaler too: watch reads these gradients
        if not finite:
            self.grads_before_skip = self._fingerprints(params, grads=True)
            for p in params:
                p.grad = None
            self.scale = (self.scale or INIT_SCALE) / 2
        return not finite

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if id(optimizer) != self.optimizer:
            return
        started = time.perf_counter()
        self.step += 1
        params = [p for group in optimizer.param_groups for p in group["params"]]
        grads = self.grads_before_skip if self.skipped else self.grads
        record = {"kind": "step", "step": self.step, "batch": self.batch, "loss": _mean_over_ranks(self.loss), "grads": grads,
                  "params": self._fingerprints(params), "skipped": self.skipped,
                  "hooked": self._hooked(), **({"batchnorm": self._batchnorm()} if self.step == 1 else {})}
        ended = time.perf_counter()
        self._spent += ended - started
        record["seconds"], record["recorder_seconds"] = ended - self._last, self._spent  # (the step, and these hooks' share)
        self._write(record)
        self._spent, self._last = 0.0, time.perf_counter()
        self.batch, self.loss, self.skipped = None, None, False
        if self.step == self.locate:
            self._write({"kind": "modules", "step": self.step, "modules": list(self.modules.values()), "draws": self.draws,
                         "nonfinite": self.nonfinite})
            raise Enough
        if self.steps is not None and self.step >= self.steps:
            raise Enough

    def _hooked(self) -> list[dict[str, Any]]:
        """The model's modules with forward hooks of the script's own, each with its first hook's
        line (a hook registered after the model was compiled is one dynamo does not see)."""
        if self.top is None or self.locate is not None:  # (locating, every computing module has gradcli's)
            return []
        return [{"path": path, "cls": type(m).__name__, **_code_line(next(iter({**m._forward_pre_hooks, **m._forward_hooks}.values())))}
                for path, m in _unwrapped(self.top).named_modules() if m._forward_hooks or m._forward_pre_hooks]

    def _batchnorm(self) -> list[dict[str, str]]:
        """The model's BatchNorm layers that are not synchronised across ranks (SyncBatchNorm)."""
        from torch.nn.modules.batchnorm import SyncBatchNorm, _BatchNorm

        if self.top is None:
            return []
        return [{"path": path, "cls": type(m).__name__} for path, m in _unwrapped(self.top).named_modules()
                if isinstance(m, _BatchNorm) and not isinstance(m, SyncBatchNorm)]

    def _fingerprints(self, params: list[torch.Tensor], *, grads: bool = False) -> dict[str, list[float]]:
        """{parameter name: [norm, projection]} of each parameter's gradient (or value)."""
        named = [(self._name(i, p), p.grad if grads else p) for i, p in enumerate(params)]
        named = [(name, t) for name, t in named if t is not None]
        return dict(zip([name for name, _ in named], summaries([t for _, t in named])))

    def _name(self, i: int, p: torch.Tensor) -> str:
        return self.names.get(id(p), f"param{i}")

    def _write(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()


def _user_line() -> dict[str, Any]:
    """The user's line that called the module: the innermost frame in the user's code."""
    frame = sys._getframe(2)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            import linecache

            code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            return {"file": frame.f_code.co_filename, "line": frame.f_lineno, "code": code}
        frame = frame.f_back  # type: ignore[assignment]
    return {"file": None, "line": None, "code": None}


def _code_line(fn: Any) -> dict[str, Any]:
    """Where a function (a hook) was written."""
    import linecache

    code = getattr(fn, "__code__", None)
    if code is None:
        return {"file": None, "line": None, "code": None}
    return {"file": code.co_filename, "line": code.co_firstlineno,
            "code": linecache.getline(code.co_filename, code.co_firstlineno).strip()}


def _event(event: Any) -> dict[str, Any] | None:
    """The recorder's first non-finite call, as JSON-ready data."""
    if event is None or event.detail.get("written"):  # an inf the user wrote (masked_fill(m, -inf)) is no overflow
        return None
    o = event.origin
    return {"call": event.call, "module": o.module, "module_class": o.module_class, "file": o.file, "line": o.line,
            "code": o.code, "kind": event.detail["kind"], "dtype": event.detail["dtype"]}


def _unwrapped(module: torch.nn.Module) -> torch.nn.Module:
    """The model inside DDP (`.module`), or the model itself."""
    from torch.nn.parallel import DistributedDataParallel

    return module.module if isinstance(module, DistributedDataParallel) else module


def _mean_over_ranks(loss: float | None) -> float | None:
    """Under torch.distributed each rank's loss is its shard's: their mean is the whole batch's
    (for a mean loss over equal shards), what one process computes."""
    import torch.distributed as dist

    if loss is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return loss
    value = torch.tensor([loss], dtype=torch.float64)
    dist.all_reduce(value)
    return float(value) / dist.get_world_size()
