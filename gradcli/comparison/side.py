"""One side of a comparison: the user's model run once, on a copy, in one setup.

Both sides start from the same copy of the weights, the same batch and the same generator
state; only the setup differs (float32 or float64 eager for the reference; compiled,
autocast, half-precision weights or GradScaler for the candidate). The user's model is never
run: `copy.deepcopy` takes its weights, buffers (BatchNorm statistics) and `.grad`, and the
copy's `.grad` is cleared, so the user's weights, gradients, optimiser and statistics stay
as they were.

`watch=True` also hooks every computing module (a leaf module, or one that owns parameters)
for its output and the gradients entering and leaving it, for `locate`, and runs the
reference under the one forward recorder (targets/record.py) for each module's line.
The hooks break a compiled graph into pieces, so the parameter gradients a comparison judges
always come from an unhooked run.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from ..targets.base import Origin
from ..targets.model import scalar_loss
from ..targets.modules import ModuleHooks

LossFn = Callable[[Any], Any]
#: GradScaler halves its scale at every skipped step: from 65536, 40 steps reach 2^-24.
MAX_SCALER_STEPS = 40


@dataclass(frozen=True)
class How:
    """How one side runs (a `Setup` gives the candidate's; the reference is `How(cast=float64)` or `How()`)."""

    cast: torch.dtype | None = None  # weights and floating inputs converted to this dtype
    amp: torch.dtype | None = None  # autocast dtype
    scaler: bool = False
    compile: bool = False
    backend: str = "inductor"
    mode: str | None = None
    eval: bool = False  # the copy in eval mode (dropout off, BatchNorm on its running statistics)
    scale: float | None = None  # a fixed loss scale (GradScaler's settled one), gradients unscaled after


@dataclass
class ModuleSeen:
    """One computing module in a watched run: its output and the gradients at its two ends."""

    path: str
    cls: str
    output: torch.Tensor | None = None  # float64 copy of its first floating output
    output_grad: torch.Tensor | None = None  # dL/d(output)
    input_grad: torch.Tensor | None = None  # dL/d(first input that requires grad)
    origin: Origin | None = None  # where the reference made its output (the recorder's tag)


@dataclass(frozen=True)
class ScalerStep:
    """One step of GradScaler's own loop: the scale it used and whether it skipped the step."""

    scale: float
    skipped: bool


@dataclass
class SideRun:
    """What one run left: the loss, each parameter's gradient, and (watched) each module."""

    loss: float
    grads: dict[str, torch.Tensor | None]
    modules: dict[str, ModuleSeen] = field(default_factory=dict)  # in forward order
    scaler_steps: list[ScalerStep] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # (sized) module path -> its output's numel
    loss_dtype: str = "float32"


def run_side(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: LossFn, how: How,
             rng_state: torch.Tensor, *, watch: bool = False, record: bool = False, sized: bool = False) -> SideRun:
    """Run `model`'s copy in `how` on the batch, from `rng_state`; the model itself is not touched."""
    work = copy.deepcopy(model)
    for p in work.parameters():
        p.grad = None
    if how.eval:
        work.eval()
    if how.cast is not None:
        work.to(how.cast)
        args, kwargs = _cast(args, how.cast), _cast(kwargs, how.cast)
    fn: Callable[..., Any] = work
    if how.compile:
        import torch._dynamo as dynamo

        dynamo.reset()  # each copy compiles afresh, never against another copy's guards
        fn = torch.compile(work, backend=how.backend, mode=how.mode)
    params = [(name, p) for name, p in work.named_parameters() if p.requires_grad]
    seen: dict[str, ModuleSeen] = {}
    names = {id(m): path for path, m in work.named_modules()} if record else None
    sizes: dict[str, int] = {}
    with _watched(work, seen, how.scale or 1.0) if watch else contextlib.nullcontext(), _sized(work, sizes, sized):
        if how.scaler:
            loss, steps = _scaler_loop(fn, args, kwargs, loss_fn, how, rng_state, params)
            return SideRun(loss, {name: p.grad for name, p in params}, seen, steps, sizes)
        loss_t = _forward(fn, args, kwargs, loss_fn, how, rng_state, names)
        scaled = loss_t * how.scale if how.scale else loss_t
        wanted = [p for _, p in params]
        found = torch.autograd.grad(scaled, wanted, allow_unused=True) if scaled.requires_grad else [None] * len(params)
        if how.scale:
            found = [None if g is None else g / how.scale for g in found]
    return SideRun(float(loss_t.detach()), {name: g for (name, _), g in zip(params, found)}, seen, sizes=sizes,
                   loss_dtype=str(loss_t.dtype).removeprefix("torch."))


def _forward(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: LossFn, how: How,
             rng_state: torch.Tensor, names: dict[int, str] | None = None) -> torch.Tensor:
    from ..targets.record import ForwardRecorder

    torch.random.set_rng_state(rng_state)
    amp = torch.autocast("cpu", dtype=how.amp) if how.amp is not None else contextlib.nullcontext()
    recorder = ForwardRecorder(names) if names is not None else contextlib.nullcontext()
    with amp:  # the loss too: a training loop computes it inside the autocast region
        with recorder:
            output = fn(*args, **kwargs)
        value = loss_fn(output)
    return scalar_loss(value)


def _scaler_loop(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: LossFn, how: How,
                 rng_state: torch.Tensor, params: list[tuple[str, torch.Tensor]]) -> tuple[float, list[ScalerStep]]:
    """GradScaler's own loop on the same batch until a step is not skipped: scale the loss,
    backward, unscale; a non-finite gradient skips the step and backs the scale off. The
    optimiser has lr 0, so every step starts from the same weights."""
    scaler = torch.amp.GradScaler("cpu")
    optimiser = torch.optim.SGD([p for _, p in params], lr=0.0)
    steps: list[ScalerStep] = []
    loss = math.nan
    for _ in range(MAX_SCALER_STEPS):
        optimiser.zero_grad(set_to_none=True)
        value = _forward(fn, args, kwargs, loss_fn, how, rng_state)
        loss = float(value.detach())
        scale = float(scaler.get_scale())
        scaler.scale(value).backward()
        scaler.unscale_(optimiser)
        skipped = sum(float(v) for v in scaler._found_inf_per_device(optimiser).values()) > 0
        scaler.step(optimiser)
        scaler.update()
        steps.append(ScalerStep(scale, skipped))
        if not skipped:
            break
    return loss, steps


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, tuple):
        return tuple(_cast(v, dtype) for v in value)
    if isinstance(value, list):
        return [_cast(v, dtype) for v in value]
    if isinstance(value, dict):
        return {k: _cast(v, dtype) for k, v in value.items()}
    return value


def computing_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """Modules that compute: leaves, and containers that own parameters (MultiheadAttention)."""
    return [(path, m) for path, m in model.named_modules()
            if path and (next(m.children(), None) is None or next(m.parameters(recurse=False), None) is not None)]


@contextlib.contextmanager
def _watched(model: torch.nn.Module, seen: dict[str, ModuleSeen], scale: float) -> Iterator[None]:
    from ..targets.record import origin_of

    def unscaled(g: torch.Tensor) -> torch.Tensor:
        return g.detach().to(torch.float64) / scale

    def hook(path: str, module: Any, args: Any, output: Any) -> None:
        if path in seen:  # a module called twice (a shared layer): its first call
            return
        entry = seen[path] = ModuleSeen(path, type(module).__name__)
        out = _first_floating(output)
        if out is not None:
            entry.output = out.detach().to(torch.float64, copy=True)
            if out.grad_fn is not None:
                entry.origin = origin_of(out.grad_fn)
            if out.requires_grad:
                out.register_hook(lambda g, e=entry: setattr(e, "output_grad", unscaled(g)))
        inp = _first_floating(args, needs_grad=True)
        if inp is not None:
            inp.register_hook(lambda g, e=entry: setattr(e, "input_grad", unscaled(g)))

    # Run by Python, not traced (eager): dynamo would compile the hook once per module path and
    # stop at its recompile limit (a ResNet's watched inductor run took 25 minutes).
    with ModuleHooks(modules=computing_modules(model), leave=hook, eager=True):
        yield


@contextlib.contextmanager
def _sized(model: torch.nn.Module, sizes: dict[str, int], on: bool) -> Iterator[None]:
    """Each module's output size (its first call), for the tolerance's reduction length."""
    if not on:
        yield
        return

    def hook(path: str, module: Any, args: Any, output: Any) -> None:
        out = _first_floating(output)
        if out is not None:
            sizes.setdefault(path, out.numel())

    with ModuleHooks(modules=model.named_modules(), leave=hook):
        yield


def _first_floating(value: Any, needs_grad: bool = False) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        ok = value.is_floating_point() and (value.requires_grad or not needs_grad)
        return value if ok else None
    if isinstance(value, (tuple, list)):
        for item in value:
            if (found := _first_floating(item, needs_grad)) is not None:
                return found
    if isinstance(value, dict):
        return _first_floating(list(value.values()), needs_grad)
    return None
