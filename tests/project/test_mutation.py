"""Mutation testing of `check-function`: correct custom autograd Functions, then copies whose
backward carries one small fault. check-function must pass every original and catch every
mutant (report a problem: exit status 1 on the command line).

Faults, each applied to every Function it fits:
  scale        every gradient times 1.01
  flip         the first input's gradient negated where that input is negative
  drop         one term of the derivative left out (written by hand per Function)
  swap         two inputs' gradients exchanged, or the gradients of two outputs swapped
  detach       the gradient detached from the graph (the double backward is lost)
  intermediate an intermediate computed in forward saved and reused in backward (first
               derivative right, second wrong: the classic gradgradcheck failure)
First-order faults must be caught at order 1; second-order ones (detach, intermediate) are
right at order 1 (no false alarm) and must be caught at order 2. Each mutant is one case of
`test_mutant_is_caught`: the catch rate is its pass rate (27 of 27 when this was written).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from typer.testing import CliRunner

import gradcli
from gradcli.cli import app
from models import Cube

Function = torch.autograd.Function


class Swish(Function):
    @staticmethod
    def forward(ctx, x, beta=1.0):
        ctx.save_for_backward(x)
        ctx.beta = beta
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(ctx.beta * x)
        f = x * s
        return g * (ctx.beta * f + s * (1 - ctx.beta * f)), None


class Product(Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y + torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * (y + torch.cos(x)), g * x


class LogSumExp(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.logsumexp(x, dim=0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.softmax(x, dim=0)


class SinCos(Function):
    """Two outputs: (sin x, cos x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, g_sin, g_cos):
        (x,) = ctx.saved_tensors
        return g_sin * torch.cos(x) - g_cos * torch.sin(x)


BASES = {Swish: "x*sigmoid(x)", Product: "x*y + sin(x)", Cube: "x**3", LogSumExp: "logsumexp(x, dim=0)", SinCos: None}


# -- faults written by hand: one dropped term and one saved intermediate per Function ------------
def _swish_drop(ctx, g):
    (x,) = ctx.saved_tensors
    return g * ctx.beta * x * torch.sigmoid(ctx.beta * x), None  # the s*(1 - beta*f) term is gone


def _product_drop(ctx, g):
    x, y = ctx.saved_tensors
    return g * y, g * x  # d sin(x)/dx left out


def _cube_drop(ctx, g):
    (x,) = ctx.saved_tensors
    return g * x**2  # the factor 3 left out


def _logsumexp_drop(ctx, g):
    (x,) = ctx.saved_tensors
    return g * torch.exp(x)  # not normalised by the sum


def _sincos_drop(ctx, g_sin, g_cos):
    (x,) = ctx.saved_tensors
    return g_sin * torch.cos(x)  # the cos output's gradient is ignored


DROPPED = {Swish: _swish_drop, Product: _product_drop, Cube: _cube_drop, LogSumExp: _logsumexp_drop, SinCos: _sincos_drop}


def _saving(forward: Callable[..., Any], backward: Callable[..., Any]) -> dict[str, Any]:
    return {"forward": staticmethod(forward), "backward": staticmethod(backward)}


def _swish_forward(ctx, x, beta=1.0):
    s = torch.sigmoid(beta * x)
    ctx.save_for_backward(x, s)  # s is computed here, outside any graph
    ctx.beta = beta
    return x * s


def _swish_backward(ctx, g):
    x, s = ctx.saved_tensors
    f = x * s
    return g * (ctx.beta * f + s * (1 - ctx.beta * f)), None


def _product_forward(ctx, x, y):
    ctx.save_for_backward(x, y, torch.cos(x))
    return x * y + torch.sin(x)


def _product_backward(ctx, g):
    x, y, cos = ctx.saved_tensors
    return g * (y + cos), g * x


def _cube_forward(ctx, x):
    ctx.save_for_backward(x, x * x)
    return x**3


def _cube_backward(ctx, g):
    x, square = ctx.saved_tensors
    return g * 3 * square


def _logsumexp_forward(ctx, x):
    ctx.save_for_backward(x, torch.softmax(x, dim=0))
    return torch.logsumexp(x, dim=0)


def _logsumexp_backward(ctx, g):
    x, softmax = ctx.saved_tensors
    return g * softmax


def _sincos_forward(ctx, x):
    sin, cos = torch.sin(x), torch.cos(x)
    # Copies, not the outputs: a saved output is tracked by autograd (right at order 2), an
    # intermediate is not.
    ctx.save_for_backward(x, sin.clone(), cos.clone())
    return sin, cos


def _sincos_backward(ctx, g_sin, g_cos):
    x, sin, cos = ctx.saved_tensors
    return g_sin * cos - g_cos * sin


INTERMEDIATE = {
    Swish: _saving(_swish_forward, _swish_backward), Product: _saving(_product_forward, _product_backward),
    Cube: _saving(_cube_forward, _cube_backward), LogSumExp: _saving(_logsumexp_forward, _logsumexp_backward),
    SinCos: _saving(_sincos_forward, _sincos_backward),
}


# -- generic faults: a wrapper around the correct backward ---------------------------------------
def _wrapped(base: type, change: Callable[[Any, tuple[Any, ...], tuple[Any, ...]], tuple[Any, ...]]) -> dict[str, Any]:
    def backward(ctx, *grad_outputs):
        grads = base.backward(ctx, *grad_outputs)
        grads = grads if isinstance(grads, tuple) else (grads,)
        changed = change(ctx, grads, grad_outputs)
        return changed if len(changed) > 1 else changed[0]

    return {"backward": staticmethod(backward)}


def _scale(ctx, grads, outs):
    return tuple(None if g is None else g * 1.01 for g in grads)


def _flip(ctx, grads, outs):
    x = ctx.saved_tensors[0]  # every Function here saves its first input first
    return (torch.where(x < 0, -grads[0], grads[0]), *grads[1:])


def _detach(ctx, grads, outs):
    return tuple(None if g is None else g.detach() for g in grads)


def mutants() -> list[tuple[str, type, int]]:
    """(name, class, order that must catch it) for every fault and every Function it fits."""
    found: list[tuple[str, type, int]] = []

    def add(base: type, fault: str, namespace: dict[str, Any], order: int) -> None:
        cls = type(f"{base.__name__}_{fault}", (base,), namespace)
        found.append((f"{base.__name__}:{fault}", cls, order))

    for base in BASES:
        add(base, "scale", _wrapped(base, _scale), 1)
        add(base, "flip", _wrapped(base, _flip), 1)
        add(base, "drop", {"backward": staticmethod(DROPPED[base])}, 1)
        add(base, "detach", _wrapped(base, _detach), 2)
        add(base, "intermediate", INTERMEDIATE[base], 2)
    add(Product, "swap", _wrapped(Product, lambda ctx, grads, outs: (grads[1], grads[0])), 1)
    add(SinCos, "swap", {"backward": staticmethod(lambda ctx, g_sin, g_cos: SinCos.backward(ctx, g_cos, g_sin))}, 1)
    return found


MUTANTS = mutants()
#: Values for inputs: both signs (the flip fault), away from 0.
VARS = {"x": "[-2.5, -1.0, -0.3, 0.4, 1.2, 2.0]", "y": "[0.7, -1.1, 1.9, -0.4, 0.25, 1.5]"}


def var_for(cls: type) -> dict[str, str]:
    names = ("x", "y") if issubclass(cls, Product) else ("x",)
    return {n: VARS[n] for n in names}


@pytest.mark.parametrize("base", list(BASES), ids=[b.__name__ for b in BASES])
def test_correct_functions_pass_at_order_2_with_their_reference(base: type):
    result = gradcli.check_function(base, var_for(base), ref=BASES[base], order=2)
    assert result.ok, str(result)


@pytest.mark.parametrize("name, cls, order", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_mutant_is_caught(name: str, cls: type, order: int):
    result = gradcli.check_function(cls, var_for(cls), order=order)
    assert not result.ok, f"{name} passed check-function --order {order}:\n{result}"
    if order == 2:
        # A second-order fault has a right first derivative: order 1 must not call it wrong.
        first = gradcli.check_function(cls, var_for(cls), order=1)
        assert first.ok, f"{name}: a false alarm at order 1:\n{first}"


def test_every_fault_is_tried_on_every_function_it_fits():
    tried = {name for name, _, _ in MUTANTS}
    faults = ("scale", "flip", "drop", "detach", "intermediate")
    assert {f"{b.__name__}:{f}" for b in BASES for f in faults} | {"Product:swap", "SinCos:swap"} == tried
    assert len(MUTANTS) == 27  # the catch rate is the share of test_mutant_is_caught that pass


# -- the same through the command line, from a file ----------------------------------------------
MUTANT_FILE = '''
import torch


class Tanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.tanh(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (1 - torch.tanh(x) ** 2){fault}
'''


@pytest.mark.parametrize("fault, order, status", [("", 2, 0), (" * 1.01", 1, 1), (" * torch.sign(x)", 1, 1), (".detach()", 2, 1)])
def test_check_function_command_exit_status(tmp_path, fault: str, order: int, status: int):
    path = tmp_path / "ops.py"
    path.write_text(MUTANT_FILE.replace("{fault}", fault), encoding="utf-8")
    result = CliRunner().invoke(app, ["check-function", f"{path}:Tanh", "--order", str(order), "--var", "x=" + VARS["x"]])
    assert result.exit_code == status, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("OK" if status == 0 else "PROBLEM")
