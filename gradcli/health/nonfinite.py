"""Where a nan or inf began: the first forward operation with a non-finite output and the
first backward node with a non-finite gradient, each with the user's line.

Only run when the first pass found a non-finite loss or gradient, so that a healthy model
pays nothing for it: forward and backward run once more, from the same random state (so
dropout draws the same masks), with every operation's node mapped to its line and every
node hooked. Gradients are taken with `torch.autograd.grad`, so `.grad` is not touched.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from .observe import _tensors
from .result import NonfiniteOrigin
from .source import Source, user_source


class _Lines(TorchFunctionMode):
    """Record each new graph node's line, and the first operation with a non-finite output."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[Any, Source | None] = {}
        self.in_loss: set[Any] = set()
        self.loss_started = False
        self.first: tuple[str, Source | None, bool] | None = None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        outputs = _tensors(out)
        if not outputs:
            return out
        source = user_source(0)
        for tensor in outputs:
            node = tensor.grad_fn
            if node is not None and node not in self.lines:
                self.lines[node] = source
                if self.loss_started:
                    self.in_loss.add(node)
        if self.first is None and any(
            (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()) for t in outputs
        ):
            self.first = (getattr(func, "__name__", repr(func)), source, self.loss_started)
        return out


def find_origin(
    model: torch.nn.Module, inputs: tuple[Any, ...], loss_fn: Callable[[Any], Any],
    params: list[torch.Tensor], rng_state: torch.Tensor,
) -> NonfiniteOrigin:
    origin = NonfiniteOrigin()
    with torch.random.fork_rng(devices=[]):
        torch.random.set_rng_state(rng_state)
        with _Lines() as lines:
            out = model(*inputs)
            lines.loss_started = True
            loss = loss_fn(out)
    if lines.first is not None:
        origin.forward_op, origin.forward_source, origin.forward_in_loss = lines.first
    if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
        return origin
    first: list[Any] = []

    def hook_for(node: Any) -> Any:
        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            if not first and any(g is not None and not bool(torch.isfinite(g).all()) for g in grad_inputs):
                first.append(node)

        return hook

    handles = [node.register_hook(hook_for(node)) for node in _nodes(loss.grad_fn)]
    try:
        torch.autograd.grad(loss, params, allow_unused=True)
    except RuntimeError:
        pass  # the first pass reported it; the hooks already saw what ran
    finally:
        for handle in handles:
            handle.remove()
    if first:
        node = first[0]
        origin.backward_node = node.name()
        origin.backward_source = lines.lines.get(node)
        origin.backward_in_loss = node in lines.in_loss
    return origin


def _nodes(root: Any) -> list[Any]:
    seen = {root}
    order = [root]
    pending = [root]
    while pending:
        node = pending.pop()
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                order.append(child)
                pending.append(child)
    return order
