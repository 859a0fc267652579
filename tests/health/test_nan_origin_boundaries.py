"""Where `grads` says a nan began (health/nonfinite.py), at the cases that decide it, against
torch's own anomaly mode: `torch.autograd.detect_anomaly()` raises at the first backward node
that returns nan ("Function 'MulBackward0' returned nan values in its 0th output"), which is
the node gradcli must name. Each case's nans are born as 0 * inf in backward, so torch's first
nan node is also the first non-finite one.

The boundaries: a node is non-finite when ANY of its outgoing gradients is (not all), an input
without a gradient (None) is skipped, a node the model's output does not reach is the loss's,
the origin is looked for when the loss OR a gradient is non-finite, and a non-finite loss with
finite gradients is its own finding while one with non-finite gradients is only a note.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

import gradcli


class Pair(nn.Module):
    """p * q * x with p = 1 and q = inf: at x = 0 backward's mul gives p's gradient
    0 * inf = nan and q's 0 * 1 = 0, one non-finite gradient out of two."""

    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.ones(1, dtype=torch.float64))
        self.q = nn.Parameter(torch.full((1,), math.inf, dtype=torch.float64))

    def forward(self, x):
        return ((self.p * self.q) * x).sum()


class Scale(nn.Module):
    """A finite output (w * x); the nan can only be made by the loss."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3, dtype=torch.float64))

    def forward(self, x):
        return self.w * x


def _anomaly_node(loss_of) -> str:
    """The node torch's anomaly mode stops at."""
    with pytest.warns(UserWarning), torch.autograd.detect_anomaly():
        with pytest.raises(RuntimeError) as err:
            loss_of().backward()
    return re.search(r"Function '(\w+)' returned nan values", str(err.value)).group(1)


def test_a_node_with_one_nan_gradient_of_two_is_the_origin():
    model, x = Pair(), torch.zeros(1, dtype=torch.float64)
    p_grad, q_grad = torch.autograd.grad(model(x), [model.p, model.q])
    assert math.isnan(p_grad.item()) and q_grad.item() == 0.0  # any, not all, of its gradients
    truth = _anomaly_node(lambda: model(x))
    result = gradcli.grads(model, x)
    assert result.origin is not None and result.origin.backward_node == truth == "MulBackward0"
    assert not result.origin.backward_in_loss  # the model made that node
    assert {p.name: p.flags for p in result.params} == {"p": ["NONFINITE"], "q": ["ZERO"]}  # q's is torch's 0
    assert f"the first non-finite gradient came from {truth} at " in result.params[0].findings[0].reason


def _loss_with_nan(out):
    """0 * (out * inf): torch's backward of the inner mul is 0 * inf = nan, in the loss."""
    return ((out * math.inf) * 0.0).sum()


def test_a_nan_made_by_the_loss_is_the_loss_s_node():
    model, x = Scale(), torch.ones(3, dtype=torch.float64)
    truth = _anomaly_node(lambda: _loss_with_nan(model(x)))
    out = model(x)
    loss = _loss_with_nan(out)
    # torch's graph: the loss's nodes are not behind the model's output
    behind, stack = set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and id(node) not in behind:
            behind.add(id(node))
            stack.extend(n for n, _ in node.next_functions)
    assert id(loss.grad_fn.next_functions[0][0].next_functions[0][0]) not in behind
    result = gradcli.grads(model, x, loss=_loss_with_nan)
    assert result.origin.backward_node == truth == "MulBackward0"
    assert result.origin.backward_in_loss and result.origin.forward_in_loss
    assert result.params[0].flags == ["NONFINITE"]
    assert "came from MulBackward0" in result.params[0].findings[0].reason


def test_the_same_nan_made_in_forward_is_not_the_loss_s():
    class InForward(Scale):
        def forward(self, x):
            return (self.w * x * math.inf) * 0.0

    model, x = InForward(), torch.ones(3, dtype=torch.float64)
    truth = _anomaly_node(lambda: model(x).sum())
    result = gradcli.grads(model, x, loss=lambda out: out.sum())
    assert result.origin.backward_node == truth == "MulBackward0"
    assert not result.origin.backward_in_loss and not result.origin.forward_in_loss
    assert " in the loss" not in result.params[0].findings[0].reason


class Root(nn.Module):
    """sqrt(w - 1) at w = 1: the output is 0 (finite), the gradient 1 / (2 sqrt(0)) = inf."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1, dtype=torch.float64))
        self.v = nn.Parameter(torch.full((1,), 2.0, dtype=torch.float64))

    def forward(self, x):
        return (torch.sqrt(self.w - x) + self.v * x).sum()


def test_a_finite_loss_with_an_infinite_gradient_looks_for_the_origin():
    model, x = Root(), torch.ones(1, dtype=torch.float64)
    loss = model(x)
    w_grad, v_grad = torch.autograd.grad(loss, [model.w, model.v])
    assert math.isfinite(loss.item()) and math.isinf(w_grad.item()) and math.isfinite(v_grad.item())
    result = gradcli.grads(model, x)
    assert result.origin is not None and result.origin.backward_node == "SqrtBackward0"
    assert {p.name: p.flags for p in result.params} == {"w": ["NONFINITE"], "v": []}
    assert result.loss_finding is None and result.notes == [] and not result.ok


@pytest.mark.parametrize("shift", [0.0, 1e39])
def test_an_infinite_loss_with_finite_gradients_is_its_own_finding(shift):
    """float32: out + 1e39 is inf while every gradient is 1; without the shift all is finite."""
    model = nn.Linear(2, 1)
    x = torch.ones(1, 2)
    loss = (model(x) + shift).sum()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    infinite = not math.isfinite(loss.item())
    assert infinite is (shift > 0)
    result = gradcli.grads(model, x, loss=lambda out: (out + shift).sum())
    assert result.ok is (not infinite)
    assert (result.loss_finding is not None) is infinite
    assert (result.origin is not None) is infinite
    if infinite:
        assert result.loss_finding.reason.startswith("the loss is inf; forward's output is finite: the loss made it")


def test_a_nan_loss_with_nan_gradients_is_a_note_not_a_second_finding():
    model, x = Pair(), torch.zeros(1, dtype=torch.float64)
    assert math.isnan(model(x).item())
    result = gradcli.grads(model, x)
    assert result.loss_finding is None and result.notes == ["the loss is nan"]


def test_a_loss_written_in_gradcli_s_language_has_no_line_and_is_said_to_be_the_loss():
    """exp(1000.0) is inf in float64; 0 * it in backward is torch's nan, in a node with no
    user line: the sentence says it was the loss's."""
    model, x = Scale(), torch.ones(3, dtype=torch.float64)
    truth = _anomaly_node(lambda: (model(x) * torch.exp(torch.tensor(1000.0, dtype=torch.float64)) * 0).sum())
    result = gradcli.grads(model, x, loss="sum(out * exp(1000.0) * 0)")
    assert result.origin.backward_node == truth and result.origin.backward_source is None
    assert result.params[0].findings[0].reason == (
        f"nan in its gradient; the first non-finite gradient came from {truth} in the loss; "
        "forward first produced nan/inf in the loss")


def test_an_inf_then_a_nan_made_inside_torch_s_own_module_name_no_line():
    """nn.MultiheadAttention given a key_padding_mask that masks every key of one sequence:
    torch itself fills the mask with -inf and its softmax makes nan of those rows. No line of
    the user's runs in between, so the sentence names the operations and no line (no " at ")."""
    torch.manual_seed(0)
    attention, x = nn.MultiheadAttention(2, 1, batch_first=True), torch.randn(2, 2, 2)
    mask = torch.tensor([[False, True], [True, True]])
    out, _ = attention(x, x, x, key_padding_mask=mask)
    assert not torch.isnan(out[0]).any() and torch.isnan(out[1]).all()  # torch's nan: the masked sequence only
    result = gradcli.grads(attention, x, x, x, key_padding_mask=mask, loss=lambda out: out[0].sum())
    origin = result.origin
    assert origin.forward_source is None and origin.nan_source is None and origin.backward_source is None
    findings = [f for p in result.params for f in p.findings if f.flag == "NONFINITE"]
    assert findings and all(f.source is None and " at " not in f.reason for f in findings)
    # torch: the mask becomes a float mask by an in-place fill of -inf (finite zeros before it)
    converted = nn.functional._canonical_mask(mask=mask, mask_name="key_padding_mask", other_type=None,
                                              other_name="", target_type=x.dtype)
    assert torch.equal(torch.isinf(converted), mask) and origin.forward_op == "masked_fill_"
    assert origin.forward_written
    assert findings[0].reason.endswith(
        f"; forward first produced a -inf constant torch wrote (not an overflow) in {origin.forward_op}, "
        f"and the nan is born in {origin.nan_op}")


class FirstCallOnly(nn.Module):
    """float32 out + 1e39 on the first call only (a forward that does not repeat: a Python
    counter, not torch's generator): the rerun that looks for the origin sees a finite loss."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(2))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return (self.w * x).sum() + (1e39 if self.calls == 1 else 0.0)


def test_a_loss_the_rerun_finds_finite_is_not_said_to_be_made_by_the_loss():
    model, x = FirstCallOnly(), torch.ones(2)
    first, second = model(x), model(x)
    assert math.isinf(first.item()) and math.isfinite(second.item())  # torch: only the first is inf
    grads = torch.autograd.grad(first, [model.w])
    assert bool(torch.isfinite(grads[0]).all())
    model.calls = 0
    result = gradcli.grads(model, x)
    assert result.origin is not None and result.origin.forward_op is None and not result.origin.forward_in_loss
    assert result.loss_finding.reason == "the loss is inf"


GHOST = '''
import torch
from torch import nn


class Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1, dtype=torch.float64))

    def forward(self, x):
        return torch.sqrt(self.w - x).sum()
'''


def test_a_line_python_cannot_read_is_named_with_its_module_and_an_empty_code(tmp_path):
    """Root's code compiled under a file name that does not exist (as a notebook's or a deleted
    file's would be): Python keeps the line number but linecache has no text for it. The source
    is still the line, in the module path torch's named_modules gives, and its code the empty
    string the JSON promises (docs/json.md: `code` is a string)."""
    import json
    import linecache

    ghost = str(tmp_path / "ghost.py")
    namespace: dict = {}
    exec(compile(GHOST, ghost, "exec"), namespace)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = namespace["Root"]()

        def forward(self, x):
            return self.inner(x)

    model, x = Outer(), torch.ones(1, dtype=torch.float64)
    (grad,) = torch.autograd.grad(model(x), [model.inner.w])
    assert math.isinf(grad.item())  # torch: sqrt's gradient at 0
    line = next(k for k, text in enumerate(GHOST.splitlines(), 1) if "torch.sqrt" in text)
    assert linecache.getline(ghost, line) == ""
    path = next(name for name, m in model.named_modules() if m is model.inner)
    result = gradcli.grads(model, x)
    source = result.origin.backward_source
    assert (source.module, source.file, source.line, source.code) == (path, ghost, line, "")
    assert str(source) == f"ghost.py:{line}"  # no code to show, and no spaces left for it
    document = json.loads(result.to_json())
    (finding,) = document["parameters"][0]["findings"]
    assert finding["source"] == document["nonfinite_origin"]["backward_source"] == {"file": ghost, "line": line, "code": ""}


class Hooked(nn.Module):
    """A tensor hook on w makes its gradient inf after every node ran: w * x's backward is finite."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(2, dtype=torch.float64))
        self.w.register_hook(lambda g: g * math.inf)

    def forward(self, x):
        return (self.w * x).sum()


def test_a_gradient_made_infinite_by_a_hook_has_no_node_and_no_line():
    model, x = Hooked(), torch.ones(2, dtype=torch.float64)
    loss = model(x)
    (grad,) = torch.autograd.grad(loss, [model.w])
    assert torch.isinf(grad).all()
    seen = []
    loss = model(x)
    loss.grad_fn.register_hook(lambda grad_inputs, grad_outputs: seen.append(grad_inputs))
    torch.autograd.grad(loss, [model.w])
    assert all(bool(torch.isfinite(g).all()) for g in seen[0] if g is not None)  # torch: the node's own are finite
    result = gradcli.grads(model, x)
    assert result.origin.backward_node is None and result.origin.forward_op is None
    (finding,) = result.params[0].findings
    assert (finding.flag, finding.reason, finding.source) == ("NONFINITE", "inf in its gradient", None)
    assert gradcli.health.param.finding_data(finding)["source"] is None
