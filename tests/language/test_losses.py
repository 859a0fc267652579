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
    "huber_loss": ("huber_loss(x, t, delta=0.5)", PRED, TARGET, lambda x, t: F.huber_loss(x, t, delta=0.5)),
    "binary_cross_entropy": ("binary_cross_entropy(sigmoid(x), t)", PRED, PROBS,
                             lambda x, t: F.binary_cross_entropy(torch.sigmoid(x), t)),
    "kl_div": ("kl_div(log_softmax(x, dim=0), t, reduction='sum')", PRED, [0.1, 0.2, 0.3, 0.4],
               lambda x, t: F.kl_div(F.log_softmax(x, dim=0), t, reduction="sum")),
    "cosine_similarity": ("cosine_similarity(x, t, dim=0)", PRED, TARGET, lambda x, t: F.cosine_similarity(x, t, dim=0)),
}

ROWS = [[0.3, -1.2, 0.8], [1.5, 0.1, -0.6], [-0.4, 0.9, 0.2], [0.7, 0.7, -1.1]]
PADDED = [2, -100, 0, 1]  # the second row is padding: ignore_index's default
W = [0.2, 1.5, 0.7]

#: Every option torch.nn.functional names, on the same footing: (text, input, target, torch).
OPTION_CASES = {
    "ce ignore_index default": ("cross_entropy(x, t)", ROWS, PADDED, lambda x, t: F.cross_entropy(x, t)),
    "ce ignore_index=0": ("cross_entropy(x, t, ignore_index=0)", ROWS, [2, 0, 0, 1],
                          lambda x, t: F.cross_entropy(x, t, ignore_index=0)),
    "ce label_smoothing": ("cross_entropy(x, t, label_smoothing=0.1)", ROWS, PADDED,
                           lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1)),
    "ce weight": ("cross_entropy(x, t, weight=w)", ROWS, PADDED,
                  lambda x, t: F.cross_entropy(x, t, weight=torch.tensor(W, dtype=torch.float64))),
    "ce weight smoothing sum": ("cross_entropy(x, t, weight=w, label_smoothing=0.2, reduction='sum')", ROWS, PADDED,
                                lambda x, t: F.cross_entropy(x, t, weight=torch.tensor(W, dtype=torch.float64),
                                                             label_smoothing=0.2, reduction="sum")),
    "ce weight smoothing mean": ("cross_entropy(x, t, weight=w, label_smoothing=0.2)", ROWS, PADDED,
                                 lambda x, t: F.cross_entropy(x, t, weight=torch.tensor(W, dtype=torch.float64),
                                                              label_smoothing=0.2)),
    "ce reduction none": ("cross_entropy(x, t, reduction='none').sum()", ROWS, PADDED,
                          lambda x, t: F.cross_entropy(x, t, reduction="none").sum()),
    "ce one row": ("cross_entropy(x[0], t[0])", ROWS, PADDED, lambda x, t: F.cross_entropy(x[0], t[0])),
    "nll weight ignore": ("nll_loss(log_softmax(x, dim=1), t, weight=w, ignore_index=0)", ROWS, [2, 0, 0, 1],
                          lambda x, t: F.nll_loss(F.log_softmax(x, dim=1), t, weight=torch.tensor(W, dtype=torch.float64),
                                                  ignore_index=0)),
    "log_softmax gather": ("-log_softmax(x, dim=-1).gather(1, t.unsqueeze(1)).mean()", ROWS, [2, 1, 0, 1],
                           lambda x, t: F.cross_entropy(x, t)),
    "mse sum": ("mse_loss(x, t, reduction='sum')", PRED, TARGET, lambda x, t: F.mse_loss(x, t, reduction="sum")),
    "l1 none": ("l1_loss(x, t, reduction='none').mean()", PRED, TARGET, lambda x, t: F.l1_loss(x, t)),
    "smooth_l1 beta": ("smooth_l1_loss(x, t, beta=2.0, reduction='sum')", PRED, TARGET,
                       lambda x, t: F.smooth_l1_loss(x, t, beta=2.0, reduction="sum")),
    "huber delta": ("huber_loss(x, t, delta=0.3)", PRED, TARGET, lambda x, t: F.huber_loss(x, t, delta=0.3)),
    "bce weight": ("binary_cross_entropy(sigmoid(x), t, weight=t + 1)", PRED, PROBS,
                   lambda x, t: F.binary_cross_entropy(torch.sigmoid(x), t, weight=t + 1)),
    "bce logits pos_weight": ("binary_cross_entropy_with_logits(x, t, pos_weight=t * 2 + 1, reduction='sum')",
                              PRED, PROBS, lambda x, t: F.binary_cross_entropy_with_logits(x, t, pos_weight=t * 2 + 1,
                                                                                          reduction="sum")),
    "kl batchmean": ("kl_div(log_softmax(x, dim=0), t, reduction='batchmean')", PRED, [0.1, 0.2, 0.3, 0.4],
                     lambda x, t: F.kl_div(F.log_softmax(x, dim=0), t, reduction="batchmean")),
    "kl log_target": ("kl_div(log_softmax(x, dim=0), log(t), log_target=True, reduction='sum')", PRED, [0.1, 0.2, 0.3, 0.4],
                      lambda x, t: F.kl_div(F.log_softmax(x, dim=0), torch.log(t), log_target=True, reduction="sum")),
    "masked mean": ("((x - t) ** 2 * m).sum() / m.sum()", PRED, TARGET,
                    lambda x, t: ((x - t) ** 2 * (t > 0)).sum() / (t > 0).sum()),
    "infonce": ("cross_entropy(x.reshape(2, 2) @ x.reshape(2, 2).T / 0.1, arange(2))", PRED, TARGET,
                lambda x, t: F.cross_entropy(x.reshape(2, 2) @ x.reshape(2, 2).T / 0.1, torch.arange(2))),
    "logsumexp contrastive": ("(logsumexp(x.reshape(2, 2), dim=1) - x.reshape(2, 2)[arange(2), arange(2)]).mean()",
                              PRED, TARGET, lambda x, t: F.cross_entropy(x.reshape(2, 2), torch.arange(2))),
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


ALL_CASES = {**LOSS_CASES, **OPTION_CASES}


def _values(text: str, x_tensor: torch.Tensor, t_tensor: torch.Tensor) -> dict:
    """The leaves a case's text names: x, t, the class weights w, the mask m (t > 0)."""
    given = {"x": x_tensor, "t": t_tensor, "w": torch.tensor(W, dtype=torch.float64), "m": (t_tensor > 0).double()}
    return {name: given[name] for name in parse(text).variables}


@pytest.mark.parametrize("name", list(ALL_CASES))
def test_the_build_equals_torch_functional_in_value_and_gradient(name):
    text, x, t, reference = ALL_CASES[name]
    x1, t1 = _tensors(x, t)
    ours = build(parse(text), _values(text, x1, t1)).output
    (ours_grad,) = torch.autograd.grad(ours, x1)
    x2, t2 = _tensors(x, t)
    theirs = reference(x2, t2)
    (their_grad,) = torch.autograd.grad(theirs, x2)
    if name in LOSS_CASES or name.startswith(("ce", "nll", "mse", "kl", "huber", "smooth", "bce")):
        assert _node_names(ours.grad_fn) == _node_names(theirs.grad_fn)  # the same graph torch builds
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-14, abs=1e-15)
    assert torch.allclose(ours_grad, their_grad, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", list(ALL_CASES))
def test_the_sympy_translation_gives_the_value_and_the_exact_gradient(name):
    text, x, t, reference = ALL_CASES[name]
    x_values = np.asarray(x, dtype=float)
    flat = [sympy.Symbol(f"x_{i}", real=True) for i in range(x_values.size)]
    symbols = np.array(flat, dtype=object).reshape(x_values.shape)
    integer = all(isinstance(v, int) for v in t)
    target = np.array([sympy.Integer(v) if integer else sympy.Float(v, 30) for v in t], dtype=object)
    known = {"x": symbols, "t": target, "w": np.array([sympy.Rational(str(v)) for v in W], dtype=object),
             "m": np.array([sympy.Integer(int(v > 0)) for v in t], dtype=object)}
    program = parse(text)
    expr = sympy.sympify(np.asarray(to_sympy(program, {n: known[n] for n in program.variables}), dtype=object).item())
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


@pytest.mark.parametrize("text", ["cross_entropy(x, t)", "cross_entropy(x, t, label_smoothing=0.1, weight=w)",
                                  "nll_loss(log_softmax(x, dim=1), t)"])
def test_ignored_rows_get_no_gradient_and_count_for_nothing(text):
    x, t = _tensors(ROWS, PADDED)
    value = build(parse(text), _values(text, x, t)).output
    (grad,) = torch.autograd.grad(value, x)
    assert torch.equal(grad[1], torch.zeros(3, dtype=torch.float64))  # the padding row
    assert grad[0].abs().sum() > 0
    # The mean is over the three rows that count, as torch's is.
    kept = torch.tensor([0, 2, 3])
    x2, t2 = _tensors(ROWS, PADDED)
    alone = build(parse(text), _values(text, x2[kept], t2[kept])).output
    assert value.item() == pytest.approx(alone.item(), rel=1e-14)


@pytest.mark.parametrize(
    "text, message",
    [
        ("cross_entropy(x, t, reduction='avg')", "'reduction' is one of 'none', 'mean', 'sum', not 'avg'"),
        ("cross_entropy(x, t, ignore=0)", "cross_entropy() has no parameter 'ignore'"),
        ("cross_entropy(x, t, label_smoothing=x)", "'label_smoothing' must be a constant"),
        ("mse_loss(x, t, beta=1.0)", "mse_loss() has no parameter 'beta'"),
        ("kl_div(x, t, reduction=sum)", "'reduction' is one of"),
        ("cross_entropy(x, t, reduction=\"mean\", reduction=\"sum\")", "error:"),
    ],
)
def test_options_are_only_those_torch_names(text, message):
    from gradcli.errors import GradcliError

    with pytest.raises(GradcliError) as info:
        parse(text)
    assert message in info.value.render() and ("column" in info.value.render() or "line" in info.value.render())
