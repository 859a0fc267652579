"""Custom Functions whose check needs more than backward against finite differences.

    gradcli check-function examples/beyond_backward.py:GradientReversal --expect-grad "-grad_output"
    gradcli check-function examples/beyond_backward.py:SignSTE --expect-grad "where(abs(x) <= 1, grad_output, 0)"
    gradcli check-function examples/beyond_backward.py:SwishJvp          # exit 1: backward is wrong, the jvp right
"""

import torch


class GradientReversal(torch.autograd.Function):
    """Identity forward, -grad_output backward (domain-adversarial training): on purpose not
    the derivative of its forward, so the gradient is declared with --expect-grad."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return -grad_output


class SignSTE(torch.autograd.Function):
    """sign(x) with the straight-through estimator: grad_output passes where |x| <= 1."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x.abs() <= 1).to(grad_output.dtype)


class SwishJvp(torch.autograd.Function):
    """x*sigmoid(x) written for torch.func (setup_context, a generated vmap rule) with a jvp;
    its backward forgets the x*s*(1-s) term, and the jvp, which has it, shows which is wrong."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * torch.sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)

    @staticmethod
    def jvp(ctx, x_tangent):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return x_tangent * (s + x * s * (1 - s))
