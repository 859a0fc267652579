"""Activations with hand-written backwards."""

import torch


class Swish(torch.autograd.Function):
    """x * sigmoid(x); sigmoid is recomputed in backward, so double backward is right too."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s + x * s * (1 - s))


class LeakyReLU(torch.autograd.Function):
    """max(x, slope * x). The deliberate bug: backward forgets the slope where x < 0."""

    @staticmethod
    def forward(ctx, x, slope=0.01):
        ctx.save_for_backward(x)
        ctx.slope = slope
        return torch.where(x > 0, x, ctx.slope * x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.where(x > 0, grad, grad), None  # should be grad * ctx.slope where x <= 0
