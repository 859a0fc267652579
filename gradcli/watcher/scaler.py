"""The GradScaler scale that would fit a step whose float16 gradients overflow.

A GradScaler multiplies the loss by its scale so that small float16 gradients do not underflow;
when a gradient passes float16's 65504 it skips the step and halves the scale. When the skips
do not end, the question is how low the scale must go. The step's model calls are replayed
once more in float32 (no autocast: nothing overflows there), backward from the gradient that
arrived at their outputs divided by the scale, i.e. the unscaled gradients, and the largest
gradient any node sends on, M, is read: a scale of at most 65504 / M keeps every one of them
finite, rounded down to a power of two as GradScaler's own halving lands on. Slightly cautious:
a few of those gradients (the loss's own) are float32 in the real step.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..graph.nodes import walk
from .calls import buffers_restored, detached, output_tensors

FLOAT16_MAX = 65504.0


def fitting_scale(calls: list[Any], params: list[torch.Tensor], scale: float) -> float | None:
    """The largest power of two that keeps the replayed step's unscaled gradients under 65504 once
    scaled; None when the gradient that arrived at the model's outputs was itself non-finite."""
    root = None
    with buffers_restored(c.module for c in calls), torch.enable_grad():
        for call in calls:
            with torch.random.fork_rng(devices=[]):
                torch.random.set_rng_state(call.rng)
                out = call.module(*detached(call.args), **detached(call.kwargs or {}))
            for tensor, grad in zip([t for t in output_tensors(out) if t.requires_grad], call.grads):
                if grad is None:
                    continue
                if not bool(torch.isfinite(grad).all()):
                    return None
                term = (tensor.float() * (grad.float() / scale)).sum()
                root = term if root is None else root + term
        if root is None or root.grad_fn is None:
            return None
        largest = [0.0]

        def seen(grad_inputs: Any, grad_outputs: Any) -> None:
            for g in grad_inputs:
                if g is not None and g.numel():
                    largest[0] = max(largest[0], float(g.detach().abs().max()))

        handles = [node.register_hook(seen) for node in walk(root.grad_fn)]
        try:
            torch.autograd.grad(root, [p for p in params if p.requires_grad], allow_unused=True)
        finally:
            for handle in handles:
                handle.remove()
    if not largest[0] > 0 or not math.isfinite(largest[0]):
        return None
    return 2.0 ** math.floor(math.log2(FLOAT16_MAX / largest[0]))
