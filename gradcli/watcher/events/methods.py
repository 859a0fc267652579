"""What the run did besides its steps, noted where the user's code did it: the optimizers and the
learning-rate schedulers it built, its `zero_grad()` calls, the `eval()`/`train()` calls on its
models. The detectors (detectors/) read these to name the line behind a finding.

torch has no process-wide hook for any of these, so for the run's length the class methods are
wrapped (`Optimizer.__init__`, `Optimizer.zero_grad`, `Module.zero_grad`, `Module.train`,
`LRScheduler.__init__`, `GradScaler.scale`, and `torch.nn.utils.clip_grad_norm_` and
`clip_grad_value_` under both their module names) and restored by `close()`. Each wrapper notes the user's line (one walk
up the stack, to the first frame in the user's files) and calls torch's own method: what the
run computes does not change. Under `gradcli.watch(...)` around a loop whose optimizer was built
before the `with`, its line is unknown (None) and the findings say so by leaving it out.
XXX: a script that did `from torch.nn.utils import clip_grad_norm_` before the watch began holds
torch's own function: its clipping is not seen.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

Site = tuple[str, int]  # (file, line) in the user's code


@dataclass
class Built:
    """An optimizer or scheduler the run built, where."""

    ref: Any  # weakref to it
    site: Site | None


@dataclass
class Clip:
    """A clip_grad_norm_ (or clip_grad_value_) call made while a GradScaler was in use."""

    site: Site | None
    backwards: int  # backward calls before it
    params: set[int]  # id() of the parameters it clipped
    norm: Any  # the total norm clip_grad_norm_ returned (a tensor, not read); None for clip_grad_value_
    max_norm: float  # or clip_value
    stages: list[tuple[Any, dict[int, Any]]]  # (weakref to a GradScaler, id(optimizer) -> its OptState at the call)


@dataclass
class RunEvents:
    """Notes kept while installed (`with RunEvents(user_site):`)."""

    user_site: Callable[[Any], Site | None]  # the innermost user frame from a frame
    optimizers: list[Built] = field(default_factory=list)
    schedulers: list[Built] = field(default_factory=list)
    zero_grads: list[tuple[int, Site | None]] = field(default_factory=list)  # (backward count at the call, site)
    modes: dict[int, tuple[bool, Site | None]] = field(default_factory=dict)  # id(module) -> (mode set, site)
    backwards: int = 0  # backward calls so far (session.py counts them)
    clips: list["Clip"] = field(default_factory=list)  # the latest clip_grad_norm_ calls
    scalers: Any = field(default_factory=weakref.WeakSet)  # the GradScalers that scaled a loss
    _saved: list[tuple[Any, str, Any]] = field(default_factory=list)
    _depth: int = 0

    def __enter__(self) -> "RunEvents":
        from torch.optim import lr_scheduler

        optimizer, module = torch.optim.Optimizer, torch.nn.Module
        self._wrap(optimizer, "__init__", self._built(self.optimizers))
        self._wrap(lr_scheduler.LRScheduler, "__init__", self._built(self.schedulers))
        self._wrap(optimizer, "zero_grad", self._zeroed)
        self._wrap(module, "zero_grad", self._zeroed)
        self._wrap(module, "train", self._mode)
        self._wrap(torch.amp.GradScaler, "scale", self._scaling)
        for name in ("clip_grad_norm_", "clip_grad_value_"):  # each the same function under two names
            self._wrap(torch.nn.utils, name, self._clipped)
            self._wrap(torch.nn.utils.clip_grad, name, self._clipped)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved = []

    # -- what the detectors ask --------------------------------------------------------------
    def site_of(self, built: list[Built], obj: Any) -> Site | None:
        return next((b.site for b in built if b.ref() is obj), None)

    def live(self, built: list[Built]) -> list[Any]:
        return [obj for obj in (b.ref() for b in built) if obj is not None]

    # -- the wrappers ------------------------------------------------------------------------
    def _wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = owner.__dict__[name]
        self._saved.append((owner, name, original))
        setattr(owner, name, make(original))

    def _built(self, into: list[Built]) -> Callable[[Any], Any]:
        events = self

        def wrap(init: Any) -> Any:
            def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
                init(obj, *args, **kwargs)
                if not any(b.ref() is obj for b in into):  # a subclass's __init__ calls its base's
                    into.append(Built(weakref.ref(obj), events.user_site(sys._getframe(1))))

            return __init__

        return wrap

    def _zeroed(self, original: Any) -> Any:
        events = self

        def zero_grad(obj: Any, *args: Any, **kwargs: Any) -> Any:
            events.zero_grads = [*events.zero_grads[-7:], (events.backwards, events.user_site(sys._getframe(1)))]
            return original(obj, *args, **kwargs)

        return zero_grad

    def _scaling(self, original: Any) -> Any:
        events = self

        def scale(scaler: Any, outputs: Any) -> Any:
            events.scalers.add(scaler)
            return original(scaler, outputs)

        return scale

    def _clipped(self, original: Any) -> Any:
        """clip_grad_norm_ or clip_grad_value_, noting its line, its parameters and each
        GradScaler's stage per optimizer at the call (READY: not unscaled yet;
        detectors/clip_scaled.py)."""
        events = self

        def clip(*args: Any, **kwargs: Any) -> Any:
            parameters = args[0] if args else kwargs.pop("parameters")
            params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)  # a generator, once
            norm = original(params, *args[1:], **kwargs)  # clip_grad_value_ returns None
            limit = args[1] if len(args) > 1 else kwargs.get("max_norm", kwargs.get("clip_value"))
            stages = [(weakref.ref(s), {k: v.get("stage") for k, v in s._per_optimizer_states.items()})
                      for s in list(events.scalers) if s.is_enabled() and s._scale is not None]
            if stages:  # no scaler, nothing to note: a plain loop pays the wrapper's call only
                events.clips = [*events.clips[-7:], Clip(events.user_site(sys._getframe(1)), events.backwards,
                                                         {id(p) for p in params}, norm, float(limit), stages)]
            return norm

        clip.__name__ = clip.__qualname__ = original.__name__
        return clip

    def _mode(self, original: Any) -> Any:
        events = self

        def train(module: Any, mode: bool = True) -> Any:
            if events._depth == 0:  # the user's own call, not train() recursing into the children
                events.modes[id(module)] = (bool(mode), events.user_site(sys._getframe(1)))
            events._depth += 1
            try:
                return original(module, mode)
            finally:
                events._depth -= 1

        return train
