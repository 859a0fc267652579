"""A user's own Swish as a custom autograd Function, the way gradcli recommends writing one.

    gradcli check-function examples/swish.py:Swish --ref "x*sigmoid(x)" --order 2
"""

import torch


class Swish(torch.autograd.Function):
    """f(x) = x * sigmoid(beta * x); backward recomputes sigmoid, so it is differentiable."""

    @staticmethod
    def forward(ctx, x, beta=1.0):
        ctx.save_for_backward(x)
        ctx.beta = beta
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        sigma = torch.sigmoid(ctx.beta * x)
        f = x * sigma
        return grad_output * (ctx.beta * f + sigma * (1 - ctx.beta * f)), None
