"""The loss rows of ops.py: gradcli's torch build against torch.nn.functional, value and
gradient, and the sympy translation against both (the exact derivative of the same loss)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
import torch

from gradcli.interpret.to_sympy import to_sympy
from gradcli.interpret.to_torch import build
from gradcli.language.parser import parse

F = torch.nn.functional
SCORES = [[0.3, -1.2, 0.8], [1.5, 0.1, -0.6]]
LABELS = [2, 0]
PRED = [0.2, -0.7, 1.9, 0.05]
TARGET = [0.5, 0.4, -0.3, 0.0]
PROBS = [0.9, 0.1, 0.5, 1.0]

#: name -> (text, input values, target values (ints: class indices), what torch computes)
LOSS_CASES = {
    "cross_entropy": ("cross_entropy(x, t)", SCORES, LABELS, lambda x, t: F.cross_entropy(x, t)),
    "nll_loss": ("nll_loss(log_softmax(x, dim=1), t)", SCORES, LABELS, lambda x, t: F.nll_loss(F.log_softmax(x, dim=1), t)),
    "mse_loss": ("mse_loss(x, t)", PRED, TARGET, lambda x, t: F.mse_loss(x, t)),
    "l1_loss": ("l1_loss(x, t)", PRED, TARGET, lambda x, t: F.l1_loss(x, t)),
    "smooth_l1_loss": ("smooth_l1_loss(x, t, beta=0.5)", PRED, TARGET, lambda x, t: F.smooth_l1_loss(x, t, beta=0.5)),
    "binary_cross_entropy_with_logits": (
        "binary_cross_entropy_with_logits(x, t)", PRED, PROBS, lambda x, t: F.binary_cross_entropy_with_logits(x, t),
    ),
}


def _node_names(root) -> list[str]:
    names, stack, seen = [], [root], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.append(fn.name())
        stack.extend(child for child, _ in fn.next_functions)
    return names


def _tensors(x: list, t: list) -> tuple[torch.Tensor, torch.Tensor]:
    x_tensor = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    integer = all(isinstance(v, int) for v in t)
    t_tensor = torch.tensor(t, dtype=torch.long if integer else torch.float64)
    return x_tensor, t_tensor


@pytest.mark.parametrize("name", list(LOSS_CASES))
def test_the_build_equals_torch_functional_in_value_and_gradient(name):
    text, x, t, reference = LOSS_CASES[name]
    x1, t1 = _tensors(x, t)
    ours = build(parse(text), {"x": x1, "t": t1}).output
    (ours_grad,) = torch.autograd.grad(ours, x1)
    x2, t2 = _tensors(x, t)
    theirs = reference(x2, t2)
    (their_grad,) = torch.autograd.grad(theirs, x2)
    assert _node_names(ours.grad_fn) == _node_names(theirs.grad_fn)  # the same graph torch builds
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-14, abs=1e-15)
    assert torch.allclose(ours_grad, their_grad, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", list(LOSS_CASES))
def test_the_sympy_translation_gives_the_value_and_the_exact_gradient(name):
    text, x, t, reference = LOSS_CASES[name]
    x_values = np.asarray(x, dtype=float)
    flat = [sympy.Symbol(f"x_{i}", real=True) for i in range(x_values.size)]
    symbols = np.array(flat, dtype=object).reshape(x_values.shape)
    integer = all(isinstance(v, int) for v in t)
    target = np.array([sympy.Integer(v) if integer else sympy.Float(v, 30) for v in t], dtype=object)
    expr = sympy.sympify(np.asarray(to_sympy(parse(text), {"x": symbols, "t": target}), dtype=object).item())
    subs = {s: sympy.Float(v, 30) for s, v in zip(flat, x_values.flat)}
    x_tensor, t_tensor = _tensors(x, t)
    value = reference(x_tensor, t_tensor)
    (grad,) = torch.autograd.grad(value, x_tensor)
    assert float(sympy.N(expr.subs(subs), 30)) == pytest.approx(value.item(), rel=1e-12)
    for symbol, got in zip(flat, grad.reshape(-1).tolist()):
        exact = float(sympy.N(sympy.diff(expr, symbol).subs(subs), 30))
        assert got == pytest.approx(exact, rel=1e-10, abs=1e-12), symbol


def test_class_indices_must_be_known_integers_for_sympy():
    symbols = np.array([[sympy.Symbol("a"), sympy.Symbol("b")]], dtype=object)
    labels = np.array([sympy.Symbol("t")], dtype=object)
    with pytest.raises(Exception, match="class indices"):
        to_sympy(parse("cross_entropy(x, t)"), {"x": symbols, "t": labels})
