"""Where the bad step's first nan or inf was born, and why: the step replayed in process.

The step was stopped before it was applied, so the weights are the ones its forward used.
Each top-level model call of the step runs again on the same arguments from the same random
state (dropout draws the same masks) under targets/record.py's recorder, which tags every
node with its module and the user's line and notes the first non-finite forward output;
backward then runs from Σ output·(the gradient that arrived at that output in the real step),
which sends every parameter exactly the real step's gradient, with every node hooked.
Gradients are taken with `torch.autograd.grad` (`.grad` is not touched) and the model's
buffers (BatchNorm's running statistics) are put back afterwards: the run goes on, or stops,
exactly as it would have. The cause comes from the same node reasoning `check` and
`trace --flow` use (verify/causes/), named in watch's catalogue.

When the gradient arriving at the model's output is itself non-finite, the nan was born in
the loss, outside any module: that code cannot be replayed in process, and the CLI reruns the
script to the step instead (rerun.py).
"""

from __future__ import annotations

import linecache
import math
from contextlib import ExitStack
from typing import Any, Callable

import torch

from ..health.nonfinite import first_nonfinite_node
from ..targets.record import ForwardRecorder, origin_of
from .calls import buffers_restored, detached, output_tensors
from .causes import backward_cause, forward_cause, function_origin, origin_from
from .result import Replay, Stop, WatchCause, WatchOrigin

def replay(stop: Stop, calls: list[Any], params: dict[str, torch.Tensor], names: dict[int, str]) -> None:
    """Fill `stop.origin`, `stop.cause` and `stop.replay` from the step's captured calls."""
    with quiet_compiler():
        _replay(stop, calls, params, names)


def _replay(stop: Stop, calls: list[Any], params: dict[str, torch.Tensor], names: dict[int, str]) -> None:
    if not calls:
        stop.replay = Replay("not_replayed", why_not="no model call was seen in this step")
        return
    if _batch(stop, calls, names) or _weights(stop, params):  # found by reading them: nothing run again
        stop.replay = Replay("inspected")
        return
    stop.replay = Replay("replayed")
    with buffers_restored(c.module for c in calls):
        recorder = ForwardRecorder(names, watch_nonfinite=True)
        with torch.enable_grad():
            outputs_finite, root, arrived_bad = _forward(calls, recorder)
            event = recorder.recording.nonfinite
            if event is not None and not outputs_finite:
                stop.origin = origin_from("forward", event.call, event.origin)
                stop.cause = forward_cause(event, stop.origin)
                return
            if arrived_bad or (outputs_finite and stop.kind == "nonfinite_loss"):
                stop.replay.why_not = "the first nan or inf is in the loss, outside the model's calls"
                return
            node = _first_bad_node(root, list(params.values()))
    if node is None:
        stop.replay.why_not = "the replayed step's gradients were finite: the step does not replay the same"
        return
    stop.origin = (_inside_backward(node, calls, params, names) or function_origin(node)
                   or origin_from("backward", node.name(), origin_of(node)))
    stop.cause = _backward_cause(node, calls, params, names)


def _inside_backward(node: Any, calls: list[Any], params: dict[str, torch.Tensor], names: dict[int, str]) -> Any:
    """For a custom autograd.Function's node: the line inside its `backward` that first made
    nan or inf. torch runs a Function's backward without the recorder's torch-function mode, so
    the step is replayed once more with the gradient arriving at each node of that Function
    kept (a pre-hook, the graph retained), and each such backward is called again directly
    (`node.apply`, which calls `backward(ctx, *grads)`) under the recorder. None when not found."""
    cls = getattr(type(node), "_forward_cls", None)
    backward = getattr(cls, "backward", None)
    file = getattr(getattr(backward, "__code__", None), "co_filename", None)
    if file is None:
        return None
    arrived: list[tuple[Any, tuple[Any, ...]]] = []
    with buffers_restored(c.module for c in calls), torch.enable_grad():
        root = _forward(calls, ForwardRecorder(names))[1]
        if root is None or root.grad_fn is None:
            return None
        handles = [n.register_prehook(lambda grads, n=n: arrived.append((n, tuple(grads))))
                   for n in _graph_nodes(root.grad_fn) if type(n) is type(node)]
        try:
            torch.autograd.grad(root, [p for p in params.values() if p.requires_grad], retain_graph=True,
                                allow_unused=True)
        except RuntimeError:
            pass  # the pre-hooks kept what arrived before it failed
        finally:
            for handle in handles:
                handle.remove()
        for bad, grads in arrived:
            if not all(g is None or bool(torch.isfinite(g).all()) for g in grads):
                continue  # not finite on arrival: not this backward's doing
            recorder = ForwardRecorder(names, watch_nonfinite=True)
            try:
                with recorder, torch.no_grad():
                    bad.apply(*grads)
            except Exception:  # noqa: BLE001 - the user's backward called out of its engine: no line, not a failure
                continue
            event = recorder.recording.nonfinite
            if event is not None and event.origin is not None and event.origin.file == file:
                origin = origin_from("backward", node.name(), event.origin)
                origin.module, origin.module_class = None, cls.__name__
                return origin
    return None


def _graph_nodes(root: Any) -> list[Any]:
    """Every node of a graph, once (graph/nodes.py's walk)."""
    from ..graph.nodes import walk

    return list(walk([root]))


def replay_loss(stop: Stop, runs: list[Callable[[], torch.Tensor]], params: dict[str, torch.Tensor],
                names: dict[int, str], what: str) -> None:
    """The step's loss computed again by the trainer's own code (`what`: Lightning's
    `training_step`, the HF Trainer's `compute_loss`), once per micro-batch of the update, with
    the recorder armed: a nan or inf born in a loss written outside the model's modules gets its
    line and cause like one inside them. Each `run()` restores the micro-batch's random state,
    precision context and buffers itself (trainers/steps.py); backward is `torch.autograd.grad`
    from the loss, so `.grad` is not touched."""
    with quiet_compiler():
        _replay_loss(stop, runs, params, names, what)


def _replay_loss(stop: Stop, runs: list[Callable[[], torch.Tensor]], params: dict[str, torch.Tensor],
                 names: dict[int, str], what: str) -> None:
    for run in runs:
        recorder = ForwardRecorder(names, watch_nonfinite=True)
        with torch.enable_grad():
            with recorder:
                loss = run()
            event = recorder.recording.nonfinite
            if event is not None and not bool(torch.isfinite(loss.detach()).all()):
                stop.origin = origin_from("forward", event.call, event.origin)
                stop.cause = forward_cause(event, stop.origin)
            else:
                node = _first_bad_node(loss, list(params.values()))
                if node is None:
                    continue
                stop.origin = function_origin(node) or origin_from("backward", node.name(), origin_of(node))
                stop.cause = _loss_backward_cause(node, run, params)
        stop.replay = Replay("replayed", what=what)
        return
    if stop.replay is not None and stop.replay.why_not is not None:
        stop.replay.why_not += f"; {what} replayed gave finite values"


def _loss_backward_cause(node: Any, run: Callable[[], torch.Tensor], params: dict[str, torch.Tensor]) -> WatchCause:
    if getattr(type(node), "_forward_cls", None) is not None:
        return backward_cause(node, None)
    from ..verify.causes.run import explain_nonfinite

    try:
        cause = explain_nonfinite(run, dict(params))
    except RuntimeError:
        cause = None
    return backward_cause(node, cause)


def _batch(stop: Stop, calls: list[Any], names: dict[int, str]) -> bool:
    """A nan or inf in what the model was given: the batch, not the model."""
    for call in calls:
        for where, value in _arguments(call):
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                bad = int((~torch.isfinite(value)).sum())
                stop.batch_nonfinite.append(where)
                module = names.get(id(call.module), "")
                file, line = call.site or (None, None)
                code = linecache.getline(file, line).strip() if file and line else None
                stop.origin = WatchOrigin("input", None, module, type(call.module).__name__, file, line, code or None)
                stop.cause = WatchCause("nonfinite_input", (
                    f"the batch given to {type(call.module).__name__} holds {bad} nan or inf of "
                    f"{value.numel()} values in {where} (shape {'x'.join(map(str, value.shape))}): "
                    "the data, not the model"))
                return True
    return False


def _weights(stop: Stop, params: dict[str, torch.Tensor]) -> bool:
    """Weights already non-finite (a step applied unchecked, with --every above 1)."""
    bad = [name for name, p in params.items() if not bool(torch.isfinite(p.detach()).all())]
    if not bad:
        return False
    stop.origin = WatchOrigin("weights", None, bad[0].rpartition(".")[0])
    stop.cause = WatchCause("nonfinite_weights", (
        f"{len(bad)} parameter(s) already hold nan or inf ({', '.join(bad[:3])}): an earlier step, not checked, "
        "applied a non-finite update; check every step (--every 1) to stop before it"))
    return True


def _arguments(call: Any) -> list[tuple[str, torch.Tensor]]:
    found = [(f"argument {i}", a) for i, a in enumerate(call.args) if isinstance(a, torch.Tensor)]
    found += [(f"'{k}'", v) for k, v in (call.kwargs or {}).items() if isinstance(v, torch.Tensor)]
    return found


def _forward(calls: list[Any], recorder: ForwardRecorder) -> tuple[bool, torch.Tensor | None, bool]:
    """Run the calls again under the recorder: (outputs finite, the backward root, whether a
    gradient that arrived at an output in the real step was non-finite)."""
    root: torch.Tensor | None = None
    finite, arrived_bad = True, False
    for call in calls:
        out = eager_again(call, recorder)
        tensors = [t for t in output_tensors(out) if t.requires_grad]
        for tensor, grad in zip(tensors, call.grads):
            if not bool(torch.isfinite(tensor.detach()).all()):
                finite = False
            if grad is None:
                continue
            if not bool(torch.isfinite(grad).all()):
                arrived_bad = True
            term = (tensor * grad.detach()).sum()
            root = term if root is None else root + term
    return finite, root, arrived_bad


def eager_again(call: Any, *within: Any) -> Any:
    """A recorded model call run again through its eager module (`_local`), from the random
    state and under the autocast it ran with (the real step's float16 ops compute in float16
    again), inside the context managers `within` (a recorder, a mode)."""
    with torch.random.fork_rng(devices=[]), ExitStack() as stack:
        torch.random.set_rng_state(call.rng)
        for device, dtype in call.autocast:
            stack.enter_context(torch.autocast(device, dtype=dtype))
        for context in within:
            stack.enter_context(context)
        return _local(call.module)(*detached(call.args), **detached(call.kwargs or {}))


def _local(module: torch.nn.Module) -> torch.nn.Module:
    """DDP's wrapped module: replaying through DDP would all-reduce on one rank alone and hang.
    A `torch.compile`d module's original: the replay's recorder is Python that dynamo would
    compile around (graph breaks, recompiles, warnings pointing into gradcli) for no gain,
    since the replay is there to find the user's line, which the eager module runs."""
    from torch.nn.parallel import DistributedDataParallel

    for _ in range(4):
        if isinstance(module, DistributedDataParallel):
            module = module.module
        elif isinstance(getattr(module, "_orig_mod", None), torch.nn.Module):  # torch._dynamo's OptimizedModule
            module = module._orig_mod
        else:
            break
    return module


class quiet_compiler:
    """While gradcli replays: torch.compile's warnings and dynamo's log lines (graph breaks in
    the recorder's code) are gradcli's own doing, not the user's, and are not shown."""

    def __enter__(self) -> None:
        import logging
        import warnings

        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", module=r"torch\._dynamo|torch\._inductor|torch\.nn\.modules\.module")
        warnings.filterwarnings("ignore", message=r".*torch\.compile")
        self._loggers = [(logger, logger.level) for logger in (logging.getLogger(name) for name in
                                                               ("torch._dynamo", "torch._inductor"))]
        for logger, _ in self._loggers:
            logger.setLevel(logging.ERROR)

    def __exit__(self, *exc: Any) -> None:
        for logger, level in self._loggers:
            logger.setLevel(level)
        self._warnings.__exit__(*exc)


def _first_bad_node(root: torch.Tensor | None, params: list[torch.Tensor]) -> Any:
    """The first node, in the order backward runs them, whose outgoing gradient holds nan or inf."""
    if root is None or root.grad_fn is None:
        return None
    return first_nonfinite_node(root, [p for p in params if p.requires_grad])


def _backward_cause(node: Any, calls: list[Any], params: dict[str, torch.Tensor], names: dict[int, str]) -> WatchCause:
    """The node reasoning of verify/causes/ on the step replayed once more, in watch's words."""
    if getattr(type(node), "_forward_cls", None) is not None:
        return backward_cause(node, None)
    from ..verify.causes.run import explain_nonfinite

    try:
        with buffers_restored(c.module for c in calls):
            cause = explain_nonfinite(lambda: _replayed_root(calls, names), dict(params))
    except RuntimeError:
        cause = None
    return backward_cause(node, cause)


def _replayed_root(calls: list[Any], names: dict[int, str]) -> torch.Tensor:
    root = _forward(calls, ForwardRecorder(names))[1]
    return root if root is not None else torch.zeros(())


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
