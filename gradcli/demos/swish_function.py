"""Swish as a custom `torch.autograd.Function`: the version `gradcli demo swish` teaches.

Swish is f(x) = x·σ(βx) (Ramachandran, Zoph & Le, 2017, arXiv:1710.05941). Written as an
autograd Function it shows the three habits a hand-written backward needs:

- save tensors with `ctx.save_for_backward`, not as attributes on `ctx`, so autograd can
  check they were not modified in place and free them with the graph;
- a non-tensor argument (β) gets `None` as its gradient;
- backward recomputes σ(βx) from the saved input with differentiable torch operations, so
  the gradient itself can be differentiated (`create_graph=True`, `gradgradcheck`).

The demo prints this file's classes with `inspect.getsource`, so what a reader sees is
exactly what runs. `gradcli.demos.swish_buggy` holds the classic mistakes.
"""

from __future__ import annotations

import torch


class Swish(torch.autograd.Function):
    """f(x) = x * sigmoid(beta * x), with the derivative of the paper."""

    @staticmethod
    def forward(ctx, input, beta=1.0):
        ctx.save_for_backward(input)
        ctx.beta = beta  # a Python number: not a tensor, so an attribute is right
        return input * torch.sigmoid(beta * input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        beta = ctx.beta
        sigma = torch.sigmoid(beta * input)  # recomputed, so backward is differentiable
        f = input * sigma
        # f'(x) = beta*f(x) + sigma(beta*x) * (1 - beta*f(x)); beta needs no gradient: None
        return grad_output * (beta * f + sigma * (1 - beta * f)), None


def swish(input, beta=1.0):
    """Swish on a tensor, the way torch's functional ops read: `swish(x, 1.5)`."""
    return Swish.apply(input, beta)
