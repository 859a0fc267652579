"""The classic mistakes of a hand-written Swish backward, as real classes.

`gradcli demo swish --buggy` runs each through the check that catches it. They are kept
small and side by side with the correct `Swish` (gradcli.demos.swish_function) so that a
diff between a buggy class and the right one is the lesson. Most of them come from one
widely copied tutorial, fixed one bug at a time:

- `SwishTutorial`: the tutorial's code as written. In backward, `input` was never assigned,
  so Python finds the built-in function `input`, and `beta * input` raises a TypeError.
- `SwishCallsTensor`: `input` read back, but `tmp(1 - tmp)` (for `tmp * (1 - tmp)`) calls
  a tensor: TypeError 'Tensor' object is not callable, on the first backward.
- `SwishWrongSign`: the parenthesis "fixed" into a formula that runs but is wrong
  (`1 + tmp`): gradcheck reports the mismatch.
- `SwishNoBeta`: the derivative of x·σ(x) used for x·σ(βx): right at β = 1 only.
- `SwishSavedSigma`: σ(βx) computed in forward and saved. The first derivative is right, so
  gradcheck passes; the saved σ is a constant to autograd, so the second derivative is
  wrong and only gradgradcheck sees it.
- `SwishCtxInput`: the input kept as `ctx.input` instead of `ctx.save_for_backward`:
  an in-place change of the input after forward goes unnoticed and backward silently uses
  the new values.
"""

from __future__ import annotations

import torch

# The tutorial names the argument `input`, shadowing the built-in; that is the point of
# SwishTutorial, so the name stays in every class here.


class SwishTutorial(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, beta=1.0):
        ctx.input = input
        ctx.beta = beta
        return input * torch.sigmoid(beta * input)

    @staticmethod
    def backward(ctx, grad_output):
        ctx.input = input  # `input` here is Python's built-in input()
        tmp = torch.sigmoid(ctx.beta * input)
        return grad_output * (tmp + ctx.beta * input * tmp(1 - tmp)), None


class SwishCallsTensor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, beta=1.0):
        ctx.save_for_backward(input)
        ctx.beta = beta
        return input * torch.sigmoid(beta * input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        tmp = torch.sigmoid(ctx.beta * input)
        return grad_output * (tmp + ctx.beta * input * tmp(1 - tmp)), None


class SwishWrongSign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, beta=1.0):
        ctx.save_for_backward(input)
        ctx.beta = beta
        return input * torch.sigmoid(beta * input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        tmp = torch.sigmoid(ctx.beta * input)
        return grad_output * (tmp + ctx.beta * input * tmp * (1 + tmp)), None


class SwishNoBeta(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, beta=1.0):
        ctx.save_for_backward(input)
        ctx.beta = beta
        return input * torch.sigmoid(beta * input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        tmp = torch.sigmoid(ctx.beta * input)
        return grad_output * (tmp + input * tmp * (1 - tmp)), None


class SwishSavedSigma(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, beta=1.0):
        sigma = torch.sigmoid(beta * input)  # computed without a graph
        ctx.save_for_backward(input, sigma)
        ctx.beta = beta
        return input * sigma

    @staticmethod
    def backward(ctx, grad_output):
        input, sigma = ctx.saved_tensors
        f = input * sigma
        beta = ctx.beta
        return grad_output * (beta * f + sigma * (1 - beta * f)), None


class SwishCtxInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, beta=1.0):
        ctx.input = input  # not save_for_backward: autograd cannot watch it
        ctx.beta = beta
        return input * torch.sigmoid(beta * input)

    @staticmethod
    def backward(ctx, grad_output):
        input, beta = ctx.input, ctx.beta
        sigma = torch.sigmoid(beta * input)
        f = input * sigma
        return grad_output * (beta * f + sigma * (1 - beta * f)), None


BUGGY = (SwishTutorial, SwishCallsTensor, SwishWrongSign, SwishNoBeta, SwishSavedSigma, SwishCtxInput)
