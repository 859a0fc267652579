"""A Function's forward and backward run by hand, so that their own graph is kept.

Through `apply`, forward runs without a graph: a tensor it computes and saves reaches
backward as a constant, and double backward misses how it depends on the input (NOTES.md:
Swish saving sigmoid(x)). Calling `forward(ctx, ...)` and `backward(ctx, ...)` directly,
with grad enabled and a context that records what they save, keeps that dependence. Two
pieces of evidence come out of it, which diagnose.py needs before it names a cause:

- which saved tensors (and tensor attributes of ctx) are intermediates: computed from the
  input (they have a graph back to it), neither an input nor an output;
- the second derivatives the same backward gives once those intermediates are
  differentiable: if they agree with finite differences where `apply`'s did not, the saved
  intermediates are what broke double backward, shown rather than guessed.

Forward and backward written with numpy or .item() leave no graph here either: nothing is
then shown, and no cause is named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .inputs import Inputs
from ..finite_differences.jacobian import leaves

Fn = Callable[[dict[str, torch.Tensor]], torch.Tensor]


class _Context:
    """What forward and backward use of ctx, recorded; any other attribute is theirs."""

    def __init__(self, needs: tuple[bool, ...]) -> None:
        self.saved_tensors: tuple[Any, ...] = ()
        self.needs_input_grad = needs
        self.materialize_grads = True

    def save_for_backward(self, *tensors: Any) -> None:
        self.saved_tensors = tensors

    # Declarations autograd acts on when the Function runs through `apply`. Run by hand there
    # is no autograd node to tell, so each is accepted and does nothing; where running by hand
    # then fails (an in-place forward on a leaf), second_order.py catches it and names no cause.
    def save_for_forward(self, *tensors: Any) -> None:
        """For a jvp, which the replay never runs."""

    def mark_dirty(self, *tensors: Any) -> None:
        """No autograd node to tell."""

    def mark_non_differentiable(self, *tensors: Any) -> None:
        """No autograd node to tell."""

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


@dataclass
class Replay:
    intermediates: list[str]  # "saved tensor 2 of 2 (shape [1])", "ctx.s (shape [3])"
    gradient: Fn  # x -> the gradient of sum(weights * out), through forward's own graph


def replay(cls: type, inputs: Inputs, tensors: dict[str, torch.Tensor], weights: torch.Tensor) -> Replay:
    """Run forward and backward by hand at `tensors`; see the module docstring."""
    uses_setup = getattr(cls, "setup_context") is not getattr(torch.autograd.Function, "setup_context")

    def run(values: dict[str, torch.Tensor]) -> tuple[_Context, tuple[torch.Tensor, ...], tuple[Any, ...]]:
        args = tuple(values[n] if t else v for n, v, t in zip(inputs.names, inputs.values, inputs.tensor))
        ctx = _Context(tuple(t for t in inputs.tensor))
        with torch.enable_grad():
            if uses_setup:
                out = cls.forward(*args)  # type: ignore[attr-defined]
                cls.setup_context(ctx, args, out)  # type: ignore[attr-defined]
            else:
                out = cls.forward(ctx, *args)  # type: ignore[attr-defined]
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return ctx, outs, args

    def gradient(values: dict[str, torch.Tensor]) -> torch.Tensor:
        fresh = leaves(values, keep_graph=True)
        ctx, outs, _ = run(fresh)
        with torch.enable_grad():
            sizes = [o.numel() for o in outs]
            parts = torch.split(weights.to(outs[0].dtype), sizes)
            grads = cls.backward(ctx, *(p.reshape(o.shape) for p, o in zip(parts, outs)))  # type: ignore[attr-defined]
        grads = grads if isinstance(grads, (tuple, list)) else (grads,)
        by_name = dict(zip(inputs.names, grads))
        return torch.cat([
            (by_name.get(n) if isinstance(by_name.get(n), torch.Tensor) else torch.zeros_like(t)).reshape(-1)
            for n, t in fresh.items()
        ])

    fresh = leaves(tensors)
    ctx, outs, _ = run(fresh)
    known = [*fresh.values(), *outs]
    found = []
    saved = [t for t in ctx.saved_tensors]
    for k, t in enumerate(saved):
        if _intermediate(t, known):
            found.append(f"saved tensor {k + 1} of {len(saved)} (shape {list(t.shape)})")
    for name, value in vars(ctx).items():
        if name != "saved_tensors" and _intermediate(value, known):
            found.append(f"ctx.{name} (shape {list(value.shape)})")
    return Replay(found, gradient)


def _intermediate(value: Any, known: list[torch.Tensor]) -> bool:
    """Computed from the input (it has a graph back to it), and not an input or output."""
    return (isinstance(value, torch.Tensor) and value.grad_fn is not None
            and not any(value is k for k in known))
