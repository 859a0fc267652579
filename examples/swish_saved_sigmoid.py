"""A Swish that passes gradcheck but has a wrong second derivative.

It saves sigmoid(x) computed in forward; to double backward that saved tensor is a constant,
so d/dx of the backward misses sigmoid's own derivative. gradgradcheck catches it:

    gradcli check-function examples/swish_saved_sigmoid.py:Swish --order 2     # exits 1
"""

import torch


class Swish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        sigma = torch.sigmoid(x)
        ctx.save_for_backward(x, sigma)
        return x * sigma

    @staticmethod
    def backward(ctx, grad_output):
        x, sigma = ctx.saved_tensors
        return grad_output * (sigma + x * sigma * (1 - sigma))
