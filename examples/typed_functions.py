"""Custom autograd Functions with the arguments and outputs real ones have (README, "Your own
autograd.Function"): integer targets, a non-differentiable index among the outputs, an
in-place forward. They are the only copies: the tests name them here too, beside their twins
in tests/fixtures/typed_functions.py, so a change here is a change to those tests.

    gradcli check-function examples/typed_functions.py:SoftmaxCrossEntropy --var "logits=randn(4, 3)" --var "target=randint(0, 3, (4,))"
"""

import torch


class SoftmaxCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of logits (N, C) against class indices (N,): target is a long
    tensor, data without a gradient."""

    @staticmethod
    def forward(ctx, logits, target: torch.Tensor):
        logp = torch.log_softmax(logits, dim=-1)
        ctx.save_for_backward(logp, target)
        return -logp.gather(-1, target.unsqueeze(-1)).mean()

    @staticmethod
    def backward(ctx, grad):
        logp, target = ctx.saved_tensors
        onehot = torch.nn.functional.one_hot(target, logp.shape[-1]).to(logp.dtype)
        return grad * (logp.exp() - onehot) / logp.shape[0], None


class SoftmaxArgmax(torch.autograd.Function):
    """(softmax over dim, its argmax, the size of dim, the top probability); the index and the
    top probability are marked non-differentiable."""

    @staticmethod
    def forward(ctx, x, dim: int = -1):
        y = torch.softmax(x, dim)
        index = y.argmax(dim)
        top = y.amax(dim)
        ctx.mark_non_differentiable(index, top)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y, index, x.shape[dim], top

    @staticmethod
    def backward(ctx, grad_y, grad_index, grad_size, grad_top):
        (y,) = ctx.saved_tensors
        return y * (grad_y - (grad_y * y).sum(ctx.dim, keepdim=True)), None


class SigmoidInplace(torch.autograd.Function):
    """sigmoid computed in place (ctx.mark_dirty), with a bug: backward forgets (1 - y)."""

    @staticmethod
    def forward(ctx, x):
        x.sigmoid_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y  # should be grad * y * (1 - y)
