"""Piecewise Functions whose checks need care: kinks, flat regions, a one-hot output.

    gradcli check-function examples/hard_activations.py:HardSwish --order 2
    gradcli check-function examples/hard_activations.py:Sparsemax --var "x=[5.0, 0.0, -1.0]"   # exit 1
"""

import torch


class HardSwish(torch.autograd.Function):
    """x * relu6(x + 3) / 6 (MobileNetV3). At -3 and 3, where it has no derivative, backward
    takes the middle piece's slope, as torch's own hardswish does: right, and the two
    entries there are reported apart, not compared."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.clamp(x + 3, 0, 6) / 6

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        middle = (2 * x + 3) / 6
        slope = torch.where(x < -3, torch.zeros_like(x), torch.where(x > 3, torch.ones_like(x), middle))
        return grad_output * slope


class Sparsemax(torch.autograd.Function):
    """sparsemax over the last dim (Martins & Astudillo 2016): right, but on an input that
    makes its output one-hot its Jacobian is all zero, and a check there tests nothing."""

    @staticmethod
    def forward(ctx, x):
        z, _ = torch.sort(x, dim=-1, descending=True)
        k = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
        cumulative = z.cumsum(dim=-1)
        size = (1 + k * z > cumulative).sum(dim=-1, keepdim=True)
        tau = (cumulative.gather(-1, size - 1) - 1) / size.to(x.dtype)
        out = torch.clamp(x - tau, min=0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (out,) = ctx.saved_tensors
        support = (out > 0).to(grad_output.dtype)
        mean = (grad_output * support).sum(dim=-1, keepdim=True) / support.sum(dim=-1, keepdim=True)
        return support * (grad_output - mean)
