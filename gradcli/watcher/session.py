"""The hooks of a watched run: every optimizer step checked before it is applied.

torch calls `register_optimizer_step_pre_hook`'s hook before any optimizer's `step()` runs;
raising there leaves the parameters and the optimizer's state as the previous step left them.
`torch.autograd.backward` (which `tensor.backward()` calls) is wrapped to note the tensor
backward ran on: the step's loss. The model's top-level calls are captured (their arguments,
the random state before them, and the gradient that arrived at their outputs) so that a bad
step can be replayed later; nothing is copied, only referenced until the step is applied.
Which modules are top-level is learnt from targets/modules.py's observer of every module during
the first step; after it, only those modules are hooked.

What is checked beyond a non-finite step is the detectors' (detectors/: the silent bugs, the
gradients' health), each told of every backward, check and applied step; the methods the run
calls (events/) are noted with their lines for them.

The cost per checked step is reading.py's one reduction and one host read, a few Python
calls per hook, and the spike statistic on two numbers.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch

from ..targets.load import is_user_file
from ..targets.modules import ModuleHooks
from . import health
from .calls import Call, output_tensors
from .detectors import CheckedStep, detectors
from .detectors.found import Found
from .events import OpSites, RunEvents
from .kinds import WORDS
from .names import Names, module_of
from .options import WatchOptions
from .precursors import Precursors
from .reading import StepReading, nonfinite_parameters, read_step
from .rows import rows_of
from .result import Replay, Stop, StopKind, WatchFinding, WatchResult, WatchStop
from .spikes import SpikeDetector
from .steplog import StepLog

#: Top-level model calls kept per step for a replay (gradient accumulation over more
#: micro-batches than this replays only the latest ones).
MAX_CALLS = 64
#: Checked steps of a loss more than doubling each time that make a divergence.
DIVERGING = 3
#: The gradient norm's spike threshold, in units of the loss's (options.spike): the largest z of
#: the global gradient norm on bench/watch_calibrate.py's 127 healthy runs was 8.3 (fine-tuning
#: with frozen BatchNorm), the runs bench/watch_spikes.py makes to spike reached 10.7 to 22.9
#: (one 8.2, a Transformer's ramp that a layer's spike warns of 3 steps earlier).
GRAD_SPIKE = 1.25
#: The findings --stop-on spike stops on.
SPIKES = ("loss_spike", "grad_spike", "layer_spike", "adam_ratio")
#: Called after each checked step with (optimizer label, step, reading); the CLI's status line.
Listener = Callable[[str, int, StepReading], None]
#: The watches installed in this process, innermost last: a trainer's callback joins the
#: innermost (`current()`) instead of installing a second set of hooks.
_ACTIVE: list["Watch"] = []


#: torch's warning about global module hooks under torch.compile: the hooks are gradcli's.
_COMPILE_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"


def current() -> "Watch | None":
    """The innermost installed watch (the `gradcli watch` command's, a `with gradcli.watch()`), if any."""
    return _ACTIVE[-1] if _ACTIVE else None


@dataclass
class Watched:
    """One optimizer and what is known about it."""

    label: str
    steps: int = 0
    loss_spikes: SpikeDetector | None = None
    grad_spikes: SpikeDetector | None = None
    precursors: Precursors | None = None  # per-layer norms and Adam's ratio (precursors.py)
    reported: set[tuple[str, str]] = field(default_factory=set)  # (finding kind, parameter) already reported
    zeros: dict[str, int] = field(default_factory=dict)  # parameter -> first step of its all-zero gradients
    recent: list[tuple[int, float]] = field(default_factory=list)  # the last few (step, loss), for a divergence
    checks: int = 0
    skips: int = 0  # a GradScaler's skipped steps in a row (callbacks.py)
    params: list[torch.Tensor] | None = None  # its parameters that require grad, as the last check read them
    spiking: set[str] = field(default_factory=set)  # the spike kinds flagged at the last check


class Watch:
    """Install with `with Watch(options):` around the user's run; `.result` says what it found.

    `models`/`optimizers` name what to watch (the Python API); left empty, every optimizer
    that steps is watched and the models are found by their top-level calls (the CLI)."""

    def __init__(self, options: WatchOptions | None = None, *, models: Iterable[torch.nn.Module] = (),
                 optimizers: Iterable[torch.optim.Optimizer] = (), listener: Listener | None = None,
                 script: Any = None, triggered: bool = False, root: torch.nn.Module | None = None) -> None:
        self.options = options or WatchOptions()
        self.result = WatchResult(script=script.name if script is not None else None)
        self.script = script
        self.listener = listener
        self.only = {id(o) for o in optimizers}
        self.tops: dict[int, torch.nn.Module] = {id(m): m for m in models}
        self.calls: list[Call] = []
        self.losses: list[torch.Tensor] = []
        self.backward_site: tuple[str, int] | None = None
        self.watched: dict[int, Watched] = {}
        self._handles: list[Any] = []
        self._discovery: ModuleHooks | None = None  # every module, during the first step
        self._top_hooks: ModuleHooks | None = None  # the models only, after it
        self._discovering = not self.tops
        self._backward: Any = None
        self._log: StepLog | None = None
        self.names = Names(self.tops, root)
        self._paused = False  # while gradcli replays a step: its own calls are not the run's
        self.dropped = False  # calls of this step were dropped (more than MAX_CALLS)
        self._bad_ranks: list[int] = []  # under torchrun: the ranks whose step was not finite
        # a trainer's callback calls check_step: Lightning's closure runs backward inside step()
        self.triggered = triggered
        self.root = root  # names modules when given (a LightningModule whose training_step calls self.net)
        self.detectors = detectors()  # the silent bugs (detectors/): told of each backward, check and step
        self.events = RunEvents(_user_site)  # the optimizers, schedulers, zero_grad and eval calls, with their lines
        self.opsites: OpSites | None = None  # the first step's softmax and loss calls, with their lines
        self.pending: list[Found] = []  # findings made at a backward, reported at the next check
        self._closure_of: Watched | None = None  # the optimizer whose LBFGS closure is running
        self._ended = False
        # a trainer's callback: (stop, parameters by name, module names) -> runs the trainer's own loss code again
        self.loss_replay: Callable[[Stop, dict[str, torch.Tensor], dict[int, str]], None] | None = None
        self.trackers: list[Any] = []  # where the step log goes besides --log (trackers.py)

    # -- installing ----------------------------------------------------------------------
    def __enter__(self) -> "Watch":
        from torch.optim import optimizer as optim_module

        self._handles = [optim_module.register_optimizer_step_pre_hook(self._pre_step),
                         optim_module.register_optimizer_step_post_hook(self._post_step)]
        if self._discovering:  # every module torch runs, until the first step has shown the models
            self._discovery = ModuleHooks(names={}, unknown=lambda module: "", enter=self._found_enter,
                                          leave=self._found_leave, kwargs=True).__enter__()
        else:
            self._hook_tops()
        self.events.__enter__()
        if self.result.steps == 0:
            self.opsites = OpSites(_user_site).start()
        self._backward = torch.autograd.backward
        torch.autograd.backward = self._on_backward
        # a GradScaler skips optimizer.step() on non-finite gradients: no pre-hook would see that step
        self._scaler_step = torch.amp.GradScaler.step
        watch = self
        torch.amp.GradScaler.step = lambda scaler, optimizer, *args, **kwargs: watch._on_scaler_step(
            scaler, optimizer, *args, **kwargs)
        if self.options.tensorboard is not None:
            from .trackers import TensorBoardTracker

            self.trackers.append(TensorBoardTracker(self.options.tensorboard))
        if self.options.log is not None or self.trackers:
            self._log = StepLog(self.options.log, self.trackers, self.result)
        # gradcli's own global module hooks (the discovery) make torch.compile(model) warn in the user's run
        warnings.filterwarnings("ignore", message=_COMPILE_HOOKS_WARNING)
        self._quiet = warnings.filters[0]
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Remove every hook and restore `torch.autograd.backward` (safe to call twice); the
        detectors' verdicts on the whole run join the findings."""
        self._first_step_done()
        self.events.close()
        if not self._ended and self.result.stop is None:
            self._ended = True
            self._report([f for d in self.detectors for f in d.end(self)], self.result.steps, "")
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if getattr(self, "_quiet", None) in warnings.filters:
            warnings.filters.remove(self._quiet)
            mutated = getattr(warnings, "_filters_mutated", None)  # (CPython's cache of decisions: renewed)
            if mutated is not None:
                mutated()
        self._quiet = None
        if self._backward is not None:
            torch.autograd.backward = self._backward
            self._backward = None
        if getattr(self, "_scaler_step", None) is not None:
            torch.amp.GradScaler.step = self._scaler_step
            self._scaler_step = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for hooks in (self._discovery, self._top_hooks):
            if hooks is not None:
                hooks.__exit__(None, None, None)
        self._discovery = self._top_hooks = None
        if self._log is not None:
            self._log.close()
            self._log = None
        self.calls, self.losses = [], []

    def join(self, root: torch.nn.Module | None = None) -> Callable[[], None]:
        """A trainer's callback inside this watch: from now on the callback's event checks each
        step (`check_step`) and the step pre-hook does not, so a step is counted once and a stop
        is this watch's, reported by whoever installed it. `root` names the modules (a
        LightningModule). Returns what undoes the join, at the fit's end."""
        before = self.triggered, self.root
        self.triggered = True
        if root is not None:
            self.root = self.names.root = root
            self.names.refresh()

        def leave() -> None:
            self.triggered, self.root = before
            self.names.root = before[1]
            self.names.refresh()

        return leave

    def track(self, tracker: Any) -> Callable[[], None]:
        """Send each checked step's record and new findings to `tracker` too (a trainer's logger,
        trackers.py); returns what stops it."""
        self.trackers.append(tracker)
        if self._log is None:
            self._log = StepLog(None, self.trackers, self.result)

        def untrack() -> None:
            if tracker in self.trackers:
                self.trackers.remove(tracker)

        return untrack

    @contextmanager
    def paused(self) -> Iterator[None]:
        """While gradcli runs the model itself (a replay, a rerun of a call): its calls, backward
        passes and steps are not the run's."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    # -- what the run does -----------------------------------------------------------------
    def _on_backward(self, tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if self._paused:
            return self._backward(tensors, *args, **kwargs)
        roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        self.losses += roots
        self.backward_site = _user_site(sys._getframe(1))
        self.events.backwards += 1
        for detector in self.detectors:
            detector.backward(self, roots)
        out = self._backward(tensors, *args, **kwargs)
        for detector in self.detectors:
            detector.backward_done(self)
        return out

    def _on_scaler_step(self, scaler: Any, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """`scaler.step(optimizer)` in the user's loop: a step it skipped (the pre-hook never ran)
        is checked here, as a skip (session._skipped) or, with a non-finite loss, a stop."""
        step = self._scaler_step
        if self.triggered or self._paused or not scaler.is_enabled() or (self.only and id(optimizer) not in self.only):
            return step(scaler, optimizer, *args, **kwargs)
        before = self._watched(optimizer).steps
        out = step(scaler, optimizer, *args, **kwargs)
        if self._watched(optimizer).steps == before:  # the pre-hook did not run: skipped
            self.check_step(optimizer, scaler)
        return out

    def _found_enter(self, path: str, module: torch.nn.Module, args: Any) -> None:
        """A module's forward begins (discovery): one not inside another is a model."""
        if self._paused or len(self._discovery.stack) != 1:  # type: ignore[union-attr]
            return
        if self.opsites is not None and _compiled(module):
            self.opsites.stop()  # dynamo would trace the mode, then compile again without it (events/opsites.py)
        if id(module) not in self.tops:
            self.tops[id(module)] = module
            if self.names.root is None:  # a LightningModule's training_step calling self.head: named from it
                self.names.root = _calling_owner(sys._getframe(1), module)
            self.names.refresh()
        self._enter(path, module, args)

    def _found_leave(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if not self._paused and not self._discovery.stack:  # type: ignore[union-attr]
            self._leave(path, module, args, kwargs, output)

    def _hook_tops(self) -> None:
        """From now on only the models found (or given) are hooked: two hooks per call."""
        names = self.names.modules
        self._top_hooks = ModuleHooks(modules=[(names.get(id(m), ""), m) for m in self.tops.values()],
                                      enter=self._enter, leave=self._leave, kwargs=True).__enter__()

    def _enter(self, path: str, module: torch.nn.Module, args: Any) -> None:
        # Only calls that build a graph can have made the step's gradients: a validation loop
        # under no_grad between two steps keeps nothing alive.
        if self._paused or not torch.is_grad_enabled() or not self._checks_next():
            return
        if len(self.calls) >= MAX_CALLS:  # many calls before one step: keep the latest, say so at a replay
            del self.calls[0]
            self.dropped = True
        self.calls.append(Call(module, tuple(args), None, torch.get_rng_state(), _user_site(sys._getframe(1)),
                               autocast=_autocast()))

    def _checks_next(self) -> bool:
        """Whether the coming step may be checked (and so replayed): always at --every 1; at
        --every N, only when an optimizer's next step is its N-th, or none has stepped yet."""
        every = self.options.every
        if every == 1 or not self.watched:
            return True
        if self._closure_of is not None:  # inside LBFGS's step(): its count already includes this step
            return self._closure_of.steps % every == 0
        return any((w.steps + 1) % every == 0 for w in self.watched.values())

    def _leave(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if self._paused:
            return
        call = next((c for c in reversed(self.calls) if c.module is module and c.kwargs is None), None)
        if call is None:
            return
        call.kwargs = dict(kwargs or {})
        if not torch.is_grad_enabled():
            return
        outputs = [t for t in output_tensors(output) if t.requires_grad]
        call.grads = [None] * len(outputs)
        for index, tensor in enumerate(outputs):
            tensor.register_hook(_keep(call, index))

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> Any:
        if self.only and id(optimizer) not in self.only:
            return None
        if self.triggered:
            return None
        watched = self._watched(optimizer)
        watched.steps += 1
        # torch passes step's own arguments with the optimizer first: (self, closure)
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        if closure is not None:  # LBFGS: forward and backward run inside step(), in the closure
            checked = self._checked_closure(optimizer, watched, closure)
            if len(args) > 1:
                return (args[0], checked, *args[2:]), kwargs
            return args, {**kwargs, "closure": checked}
        if watched.steps % self.options.every == 0:
            self._check(optimizer, watched)
        return None

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.only and id(optimizer) not in self.only:
            return
        self.result.steps += 1
        watched = self._watched(optimizer)
        if watched.params is None:
            watched.params = _trained(optimizer)
        applied = CheckedStep(self, optimizer, watched, watched.params, [], None)
        for detector in self.detectors:
            detector.applied(applied)
        self.calls, self.losses, self.dropped = [], [], False
        self._first_step_done()
        if self._discovering:  # the first step is done: hook only the models found
            self._discovering = False
            self._discovery.__exit__(None, None, None)  # type: ignore[union-attr]
            self._discovery = None
            self._hook_tops()

    def _checked_closure(self, optimizer: torch.optim.Optimizer, watched: Watched, closure: Callable[[], Any]) -> Any:
        def checked() -> Any:
            self.calls, self.losses = [], []
            self._closure_of = watched
            try:
                loss = closure()
            finally:
                self._closure_of = None
            if watched.steps % self.options.every == 0:
                self._check(optimizer, watched)
            return loss

        return checked

    def check_step(self, optimizer: torch.optim.Optimizer, scaler: Any = None) -> None:
        """The step about to be applied, checked when a trainer's callback says so (triggered).
        `scaler` is the run's GradScaler, if any: non-finite gradients under a finite loss are
        then its skipped step, counted, and a stop only after `options.skips` in a row."""
        watched = self._watched(optimizer)
        watched.steps += 1
        if watched.steps % self.options.every == 0:
            self._check(optimizer, watched, scaler if scaler is not None and scaler.is_enabled() else None)

    # -- the check ---------------------------------------------------------------------------
    def _watched(self, optimizer: torch.optim.Optimizer) -> Watched:
        watched = self.watched.get(id(optimizer))
        if watched is None:
            o = self.options
            same = sum(1 for w in self.watched.values() if w.label.split("#")[0] == type(optimizer).__name__)
            label = type(optimizer).__name__ + (f"#{same + 1}" if same else "")
            watched = Watched(label, loss_spikes=SpikeDetector(o.window, o.spike, o.spike_ratio),
                              grad_spikes=SpikeDetector(o.window, GRAD_SPIKE * o.spike, o.spike_ratio),
                              precursors=Precursors(o.window, o.spike, o.spike_ratio, o.adam_ratio, o.every))
            self.watched[id(optimizer)] = watched
            self.result.optimizers.append(label)
        return watched

    def _first_step_done(self) -> None:
        if self.opsites is not None:
            self.opsites.stop()
            self.opsites = None

    def _check(self, optimizer: torch.optim.Optimizer, watched: Watched, scaler: Any = None) -> None:
        params = watched.params = _trained(optimizer)
        grads = [p.grad for p in params]
        precursors: Precursors = watched.precursors  # type: ignore[assignment]
        reading = read_step(self.losses, grads, precursors.moments.wanted(optimizer))
        watched.checks += 1
        self.result.checks += 1
        step = watched.steps
        names = self.names.parameters(params)
        found: list[Found] = []
        decided = _ranks_deciding(reading, grads)
        self._bad_ranks = [abs(r) - 1 for r in decided]
        if decided and reading.finite:  # another rank's step is bad: every rank stops at this step
            self._stop(optimizer, watched, [], names, params, reading,
                       "nonfinite_loss" if decided[0] < 0 else "nonfinite_gradient")
        if not reading.finite:
            bad = nonfinite_parameters(grads)
            if bad and scaler is not None and all(math.isfinite(v) for v in reading.losses):
                return self._skipped(optimizer, watched, [names[i] for i in bad], names, params, reading, scaler)
            if bad or not all(math.isfinite(v) for v in reading.losses):
                if self._log is not None:  # the stopped step ends the log, its numbers as they were
                    self._log.write(watched.label, step, reading, names, None, None)
                self._stop(optimizer, watched, [names[i] for i in bad], names, params, reading)
            found.append(health.overflowing_norms(reading, names, watched.reported))
        watched.skips = 0
        if reading.loss is not None:
            watched.recent = [*watched.recent[-(DIVERGING - 1):], (step, reading.loss)]
        loss_spike = watched.loss_spikes.add(reading.loss)  # type: ignore[union-attr]
        grad_spike = watched.grad_spikes.add(reading.grad_norm)  # type: ignore[union-attr]
        spikes = [health.spike_finding("loss_spike", loss_spike)] if loss_spike is not None else []
        if grad_spike is not None:
            spikes.append(health.spike_finding("grad_spike", grad_spike, reading, names))
        # a spike is reported when it starts: the checks it goes on for are one warning, as a layer's are
        found += [f for f in spikes if f.kind not in watched.spiking]
        watched.spiking = {f.kind for f in spikes}
        found += precursors.judge(reading, names, params)
        checked = CheckedStep(self, optimizer, watched, params, names, reading)
        found += self.pending
        self.pending = []
        for detector in self.detectors:
            found += detector.check(checked)
        spiking = [f for f in found if f.kind in SPIKES]
        rows = rows_of(self, optimizer, params, flagged=True) if spiking and self.options.replay else None
        if rows is not None:  # which rows of the batch carry it (watcher/rows/)
            spiking[0].detail["rows"] = rows
        self._report(_explained(found), step, watched.label)
        if self._log is not None:
            self._log.write(watched.label, step, reading, names, watched.loss_spikes.last_z,  # type: ignore[union-attr]
                            watched.grad_spikes.last_z, precursors.ratios)  # type: ignore[union-attr]
        if self.listener is not None:
            self.listener(watched.label, step, reading)
        if "spike" in self.options.stop_on and spiking:
            kind, parameters, detail = spiking[0][:3]
            layer = detail.get("layer")
            self.result.stop = Stop(step, "spike", watched.label, parameters if layer is not None else [],
                                    layer, reading.loss)
            self.result.notes.append(f"stopped on {WORDS[kind].sentence}" + (f" in {layer or 'the model'}" if layer is not None
                                                                     else "") + " (--stop-on spike)")
            raise WatchStop(self.result)

    def _report(self, found: list[Found], step: int, label: str) -> None:
        for f in found:
            modules = f.modules if f.modules is not None else list(dict.fromkeys(
                m for m in (module_of(p) for p in f.parameters) if m is not None))
            self.result.findings.append(WatchFinding(
                f.at or step, f.kind, label, f.parameters, modules[0] if modules else None, f.detail,
                modules=modules, file=f.site[0] if f.site else None, line=f.site[1] if f.site else None))

    def _skipped(self, optimizer: torch.optim.Optimizer, watched: Watched, bad: list[str], names: list[str],
                 params: list[torch.Tensor], reading: StepReading, scaler: Any) -> None:
        """A GradScaler's skipped step: normal while its scale settles, a stop when the skips do not end."""
        watched.skips += 1
        self.result.skipped += 1
        if watched.skips < self.options.skips:
            self.calls, self.losses = [], []  # the scaler drops this step: its calls are not the next one's
            return
        scale = float(scaler.get_scale())  # read only here: a healthy step pays no second host read
        first = scale * 2 ** (watched.skips - 1)
        note = (f"GradScaler skipped {watched.skips} steps in a row: its scale fell from {first:g} to {scale:g} and the "
                "gradients still overflowed float16")
        fits = None
        if self.options.replay and all(math.isfinite(v) for v in reading.losses):
            from .scaler import fitting_scale

            with self.paused():
                try:
                    fits = fitting_scale(list(self.calls), params, scale)
                except Exception:  # noqa: BLE001 - an estimate that fails must not hide the stop
                    fits = None
        if fits is not None:
            note += (f"; the step's unscaled gradients would fit float16 at a scale of {fits:g}" +
                     (" (below 1: the model's own gradients overflow float16, whatever the scaler does)" if fits < 1
                      else f" (GradScaler(init_scale={fits:g}))"))
        self.result.notes.append(note)
        self._stop(optimizer, watched, bad, names, params, reading, "scaler_skips", scale, fits)

    def _stop(self, optimizer: torch.optim.Optimizer, watched: Watched, bad: list[str], names: list[str],
              params: list[torch.Tensor], reading: StepReading, kind: StopKind | None = None,
              scale: float | None = None, fits: float | None = None) -> None:
        loss_bad = any(not math.isfinite(v) for v in reading.losses)
        kind = kind or ("nonfinite_loss" if loss_bad else "nonfinite_gradient")
        stop = Stop(watched.steps, kind, watched.label, bad, module_of(bad[0]) if bad else None, reading.loss)
        stop.scale, stop.fits = scale, fits
        stop.ranks = list(self._bad_ranks) or None
        self.result.stop = stop
        losses = [loss for _, loss in watched.recent]
        if len(losses) == DIVERGING and all(0 < a and 2 * a < b for a, b in zip(losses, losses[1:])):
            first, last = watched.recent[0], watched.recent[-1]
            self.result.notes.append(f"the loss grew from {first[1]:.3g} at step {first[0]} to {last[1]:.3g} at step "
                                     f"{last[0]}, more than doubling each step: the run diverged before it overflowed "
                                     "(a learning rate too high?)")
        if self.options.replay:
            from .replay import replay

            started = time.perf_counter()
            with self.paused():
                try:
                    if self.dropped:
                        raise RuntimeError(f"the step made more than {MAX_CALLS} model calls; only the latest were kept")
                    replay(stop, list(self.calls), dict(zip(names, params)), self.names.modules)
                except Exception as err:  # noqa: BLE001 - a replay that fails must not hide the stop
                    stop.replay = Replay("not_replayed", why_not=f"the replay failed: {type(err).__name__}: {err}")
                try:
                    if stop.origin is None and self.loss_replay is not None:  # the trainer's own step code again
                        self.loss_replay(stop, dict(zip(names, params)), self.names.modules)
                except Exception as err:  # noqa: BLE001
                    stop.replay = Replay("not_replayed", why_not=(f"{stop.replay.why_not}; " if stop.replay and
                                                                  stop.replay.why_not else "")
                                         + f"its loss code failed: {type(err).__name__}: {err}")
            if stop.replay is not None:
                stop.replay.seconds = time.perf_counter() - started
            stop.rows = rows_of(self, optimizer, params)  # which rows of the batch carry it (watcher/rows/)
        if self.options.save is not None:
            from .bundle import save_bundle

            save_bundle(self.options.save, self, optimizer, stop, self.script)
        raise WatchStop(self.result)


def _compiled(module: torch.nn.Module) -> bool:
    """A torch.compile'd model (asked without importing dynamo, which a run that never compiles never loads)."""
    dynamo = sys.modules.get("torch._dynamo.eval_frame")
    return dynamo is not None and isinstance(module, dynamo.OptimizedModule)


def _calling_owner(frame: Any, module: torch.nn.Module) -> torch.nn.Module | None:
    """The module whose own method (the user's code: `self.head(x)` in a training_step) called
    `module`, when `module` is one of its submodules: the model its names belong to."""
    while frame is not None and not _is_user(frame.f_code.co_filename):
        frame = frame.f_back
    owner = frame.f_locals.get("self") if frame is not None else None
    if isinstance(owner, torch.nn.Module) and owner is not module and any(m is module for m in owner.modules()):
        return owner
    return None


def _explained(found: list[Found]) -> list[Found]:
    """A gradient reset between backward and step is why the step saw none: not its own finding too."""
    reset = {name for f in found if f.kind == "zeroed_before_step" for name in f.parameters}
    if not reset:
        return found
    kept = [f._replace(parameters=[p for p in f.parameters if p not in reset]) if f.kind in ("no_gradient", "dead")
            else f for f in found]
    return [f for f in kept if f.parameters or f.kind not in ("no_gradient", "dead")]


def _trained(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]


def _ranks_deciding(reading: StepReading, grads: list[torch.Tensor | None]) -> list[int]:
    """Under torch.distributed, every rank's verdict on this step from one all-reduce of a small
    flag tensor, so that all ranks stop at the same step (a rank that stopped alone would leave
    the others waiting in their next collective). Returns the bad ranks as -(rank+1) when their
    loss was non-finite, rank+1 when only their gradients were (loss ranks first); [] when all
    are fine or there is no process group."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return []
    world, rank = dist.get_world_size(), dist.get_rank()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    flags = torch.zeros(world, 2, device=device)
    flags[rank, 0] = float(not all(math.isfinite(v) for v in reading.losses))
    flags[rank, 1] = float(not all(n is None or math.isfinite(n) for n in reading.norms))
    dist.all_reduce(flags)
    seen = flags.tolist()
    return [-(r + 1) for r in range(world) if seen[r][0]] or [r + 1 for r in range(world) if seen[r][1]]


def _autocast() -> list[tuple[str, torch.dtype]]:
    """The autocast in force for a call (device, dtype), so that its replay computes in the same dtypes."""
    return [(device, torch.get_autocast_dtype(device)) for device in ("cpu", "cuda") if torch.is_autocast_enabled(device)]


def _keep(call: Call, index: int) -> Callable[[torch.Tensor], None]:
    """The hook that keeps the gradient arriving at a call's output. It holds the call weakly:
    the output tensor holds the hook, and a strong reference back would make a cycle that
    only the cyclic collector frees (a GPT-2's logits and their gradient, every step: 5.6 GB
    after 50 steps of the benchmark, before this)."""
    held = weakref.ref(call)

    def keep(grad: torch.Tensor) -> None:
        found = held()
        if found is not None:
            found.grads[index] = grad

    return keep


def _user_site(frame: Any) -> tuple[str, int] | None:
    """The innermost frame in the user's own files: (file, line)."""
    while frame is not None and not _is_user(frame.f_code.co_filename):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


_USER: dict[str, bool] = {}


def _is_user(filename: str) -> bool:
    """is_user_file, remembered per file: it resolves the path, and hooks ask every step."""
    known = _USER.get(filename)
    if known is None:
        known = _USER[filename] = is_user_file(filename)
    return known
