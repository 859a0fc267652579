"""Where a nan or inf began: the first forward operation with a non-finite output and the
first backward node with a non-finite gradient, each with the user's line.

Only run when the first pass found a non-finite loss or gradient, so that a healthy model
pays nothing for it: forward runs once more from the same random state (so dropout draws
the same masks) under targets/record.py's ForwardRecorder, which tags every node with its
module and line and notes the first non-finite output; then backward runs with every node
hooked. Gradients are taken with `torch.autograd.grad`, so `.grad` is not touched; a node
the recorder did not tag was made by the loss.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch

from ..graph.nodes import reachable, walk
from ..targets.base import Origin
from ..targets.flatten import tensors_in
from ..targets.record import ForwardRecorder, origin_of
from .result import NonfiniteOrigin


def find_origin(
    model: torch.nn.Module, call: Callable[[], Any], loss_fn: Callable[[Any], Any],
    params: list[torch.Tensor], rng_state: torch.Tensor,
) -> NonfiniteOrigin:
    origin = NonfiniteOrigin()
    names = {id(m): path for path, m in model.named_modules()}
    recorder = ForwardRecorder(names, watch_nonfinite=True)
    with torch.random.fork_rng(devices=[]):
        torch.random.set_rng_state(rng_state)
        with recorder:
            out = call()
        loss = loss_fn(out)
    event = recorder.recording.nonfinite
    if event is not None:
        origin.forward_op, origin.forward_source = event.call, _source(event.origin)
        origin.forward_kind, origin.forward_written = event.detail.get("kind"), bool(event.detail.get("written"))
        nan = recorder.recording.first_nan
        if nan is not None and nan is not event:
            origin.nan_op, origin.nan_source = nan.call, _source(nan.origin)
            origin.nan_masked_rows = nan.detail.get("masked_rows")
        if origin.nan_masked_rows:
            origin.fixes = _tried_fixes(call, loss_fn, params, rng_state)
    elif isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss.detach()).all()):
        origin.forward_op, origin.forward_in_loss = "the loss", True
    if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
        return origin
    node = first_nonfinite_node(loss, params)
    if node is not None:
        origin.backward_node = node.name()
        tagged = origin_of(node)
        origin.backward_source = _source(tagged)
        # A node forward did not make is the loss's (a loss function's own nodes carry its
        # lines too, so the tag alone no longer tells).
        made_by_forward = reachable([t.grad_fn for t in tensors_in(out)])
        origin.backward_in_loss = id(node) not in made_by_forward
    return origin


def first_nonfinite_node(root: torch.Tensor, params: list[torch.Tensor]) -> Any:
    """The first node of `root`'s graph, in the order backward runs them, whose outgoing
    gradient holds nan or inf; None when none does. The gradients are taken with
    torch.autograd.grad (`.grad` is not touched); a backward that raises part-way still
    reports what ran before it."""
    first: list[Any] = []

    def hook_for(node: Any) -> Any:
        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            if not first and any(g is not None and not bool(torch.isfinite(g).all()) for g in grad_inputs):
                first.append(node)

        return hook

    handles = [node.register_hook(hook_for(node)) for node in walk(root.grad_fn)]
    try:
        torch.autograd.grad(root, params, allow_unused=True)
    except RuntimeError:
        pass  # the hooks saw what ran before it failed
    finally:
        for handle in handles:
            handle.remove()
    return first[0] if first else None


def _tried_fixes(call: Callable[[], Any], loss_fn: Callable[[Any], Any], params: list[torch.Tensor],
                 rng_state: torch.Tensor) -> list[Any]:
    """A softmax of fully masked rows made the nan: the usual fixes, each run on the model
    from the same random state, judged by the loss and every gradient being finite."""
    from ..verify.causes.masked_rows import try_fixes

    def finite() -> bool:
        with torch.random.fork_rng(devices=[]):
            torch.random.set_rng_state(rng_state)
            loss = loss_fn(call())
        if not isinstance(loss, torch.Tensor) or not bool(torch.isfinite(loss.detach()).all()):
            return False
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        return all(g is None or bool(torch.isfinite(g).all()) for g in grads)

    return try_fixes(finite)


def _source(origin: Origin | None) -> Origin | None:
    """The recorder's origin as a user's line (None when it has no file and line)."""
    if origin is None or origin.file is None or origin.line is None:
        return None
    return replace(origin, code=origin.code or "")
