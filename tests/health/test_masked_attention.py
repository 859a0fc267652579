"""The nan of a padded attention mask is blamed on softmax's row, not on the user's -inf
(issue 24, case 4). Truths come from torch run here on the same model: where the first inf
and the first nan appear, whose the -inf is, and that each fix makes everything finite."""

from __future__ import annotations

import importlib.util

import torch

import gradcli
from paths import FIXTURES

MODEL = FIXTURES / "models" / "padded_attention.py"
TARGET = f"{MODEL}:PaddedSelfAttention"
FILL_LINE = "scores = scores.masked_fill(~keep[:, None, :], float(\"-inf\"))"
SOFTMAX_LINE = "attn = torch.softmax(scores, dim=-1)"


def _line(code: str) -> int:
    return next(i for i, text in enumerate(MODEL.read_text().splitlines(), 1) if code in text)


def _module():
    spec = importlib.util.spec_from_file_location("padded_attention_truth", MODEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _finite_everywhere(model: torch.nn.Module, x: torch.Tensor, forward) -> bool:
    loss = forward(model, x).sum()
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    return bool(torch.isfinite(loss)) and all(g is None or bool(torch.isfinite(g).all()) for g in grads)


def _by_hand(model, x, fill=None, zero_rows=False):
    """The model's forward written out, with either fix applied."""
    keep = torch.arange(x.shape[1])[None, :] < torch.tensor([3, 0])[:, None]
    scores = model.q(x) @ model.k(x).transpose(1, 2) / x.shape[-1] ** 0.5
    scores = scores.masked_fill(~keep[:, None, :], float("-inf") if fill is None else fill)
    empty = (scores == float("-inf")).all(dim=-1, keepdim=True)
    if zero_rows:
        return torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0) @ model.v(x)
    return torch.softmax(scores, dim=-1) @ model.v(x)


def test_torch_itself_makes_the_nan_in_softmax_from_a_written_minus_inf():
    torch.manual_seed(0)
    model, x = _module().PaddedSelfAttention(), torch.randn(2, 4, 8)
    keep = torch.arange(4)[None, :] < torch.tensor([3, 0])[:, None]
    scores = model.q(x) @ model.k(x).transpose(1, 2) / 8 ** 0.5
    assert torch.isfinite(scores).all()  # no overflow: the -inf is the constant
    filled = scores.masked_fill(~keep[:, None, :], float("-inf"))
    assert torch.isinf(filled).any() and not torch.isnan(filled).any()
    assert torch.isnan(torch.softmax(filled, dim=-1)).any()  # born here: 0/0 on all -inf rows
    assert int((filled == float("-inf")).all(dim=-1).sum()) == 4
    assert not _finite_everywhere(model, x, lambda m, v: m(v))
    assert _finite_everywhere(model, x, lambda m, v: _by_hand(m, v, fill=torch.finfo(v.dtype).min))
    assert _finite_everywhere(model, x, lambda m, v: _by_hand(m, v, zero_rows=True))


def test_grads_names_softmax_as_the_origin_and_checks_both_fixes():
    torch.manual_seed(0)
    model, x = _module().PaddedSelfAttention(), torch.randn(2, 4, 8)
    result = gradcli.grads(model, x, loss="out.sum()")
    assert not result.ok
    finding = next(f for p in result.params for f in p.findings if f.flag == "NONFINITE")
    assert finding.source is not None and finding.source.line == _line(SOFTMAX_LINE)
    assert "your own -inf constant (not an overflow) in masked_fill" in finding.reason
    assert "the nan is born in softmax" in finding.reason and "4 rows of its input are -inf throughout" in finding.reason
    assert "overflow" not in finding.reason.replace("(not an overflow)", "")
    assert finding.reason.count("checked on your model, loss and gradients finite") == 2



def test_one_fully_masked_row_is_told_as_one_row():
    """One query per sequence: the padded sequence leaves a single row of -inf (torch counts it)."""
    torch.manual_seed(0)
    model, x = _module().PaddedSelfAttention(), torch.randn(2, 1, 8)
    keep = torch.arange(1)[None, :] < torch.tensor([3, 0])[:, None]
    scores = model.q(x) @ model.k(x).transpose(1, 2) / 8 ** 0.5
    filled = scores.masked_fill(~keep[:, None, :], float("-inf"))
    assert int((filled == float("-inf")).all(dim=-1).sum()) == 1, "the premise: one row"
    result = gradcli.grads(model, x, loss="out.sum()")
    finding = next(f for p in result.params for f in p.findings if f.flag == "NONFINITE")
    assert "the nan is born in softmax" in finding.reason and ": 1 row of its input is -inf throughout," in finding.reason

def test_trace_flow_tells_the_nan_from_the_inf_and_the_constant_from_an_overflow():
    result = gradcli.trace(TARGET, ["x=randn(2,4,8)"], loss="out.sum()", seed=0, flow=True)
    forward = result.forward_nonfinite
    assert (forward["call"], forward["kind"], forward["written"], forward["line"]) == (
        "masked_fill", "inf", True, _line(FILL_LINE))
    nan = forward["first_nan"]
    assert (nan["call"], nan["kind"], nan["line"], nan["masked_rows"]) == ("softmax", "nan", _line(SOFTMAX_LINE), 4)
    cause = result.cause
    assert cause.kind == "masked_row" and cause.node == "SoftmaxBackward0"
    assert "written by masked_fill()" in cause.summary and "torch.finfo(scores.dtype).min" in cause.summary
    assert cause.summary.count("checked on your model, loss and gradients finite") == 2


def test_a_fix_is_judged_on_the_gradients_torch_gives_and_a_parameter_without_one_is_no_failure():
    """A parameter forward never uses gets no gradient from torch (None, with allow_unused):
    each fix still makes the loss and every gradient torch does give finite."""
    torch.manual_seed(0)
    base = _module().PaddedSelfAttention

    class WithUnused(base):
        def __init__(self):
            super().__init__()
            self.unused = torch.nn.Parameter(torch.ones(2))

    model, x = WithUnused(), torch.randn(2, 4, 8)
    fixed = _by_hand(model, x, fill=torch.finfo(x.dtype).min).sum()
    names = [name for name, _ in model.named_parameters()]
    grads = dict(zip(names, torch.autograd.grad(fixed, list(model.parameters()), allow_unused=True)))
    assert grads["unused"] is None and all(g is not None for name, g in grads.items() if name != "unused")
    assert _finite_everywhere(model, x, lambda m, v: _by_hand(m, v, fill=torch.finfo(v.dtype).min))
    assert _finite_everywhere(model, x, lambda m, v: _by_hand(m, v, zero_rows=True))
    result = gradcli.grads(model, x, loss="out.sum()")
    assert [fix.finite for fix in result.origin.fixes] == [True, True]
    finding = next(f for p in result.params for f in p.findings if f.flag == "NONFINITE")
    assert finding.reason.count("checked on your model, loss and gradients finite") == 2


def test_a_fix_that_leaves_the_loss_infinite_is_no_fix_though_every_gradient_is_finite():
    """out.sum() + 1e39 is inf in float32 whatever the softmax does: with either fix torch's
    gradients are finite (those of a sum) but the loss is not, so neither fix is said to work."""
    torch.manual_seed(0)
    model, x = _module().PaddedSelfAttention(), torch.randn(2, 4, 8)
    for fixed in (_by_hand(model, x, fill=torch.finfo(x.dtype).min), _by_hand(model, x, zero_rows=True)):
        loss = fixed.sum() + 1e39
        grads = torch.autograd.grad(loss, list(model.parameters()))
        assert torch.isinf(loss) and all(bool(torch.isfinite(g).all()) for g in grads)
    result = gradcli.grads(model, x, loss=lambda out: out.sum() + 1e39)
    assert [fix.finite for fix in result.origin.fixes] == [False, False]
    finding = next(f for p in result.params for f in p.findings if f.flag == "NONFINITE")
    assert finding.reason.count("tried on your model, still not finite") == 2
    assert "checked on your model" not in finding.reason
    assert "softmax of such a row is exp(-inf - (-inf)) = 0/0; fixes: " in finding.reason  # one sentence, its parts by "; "


class InPlaceMask(torch.nn.Module):
    """The same attention with the mask written in place: `scores.masked_fill_(..., -inf)`."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.q, self.k, self.v = torch.nn.Linear(dim, dim), torch.nn.Linear(dim, dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        keep = torch.arange(x.shape[1])[None, :] < torch.tensor([3, 0])[:, None]
        scores = self.q(x) @ self.k(x).transpose(1, 2) / x.shape[-1] ** 0.5
        scores.masked_fill_(~keep[:, None, :], float("-inf"))
        return torch.softmax(scores, dim=-1) @ self.v(x)


def test_an_in_place_mask_is_the_user_s_own_constant_too():
    """masked_fill_ holds the -inf once it ran: whether the constant was the user's is asked of
    the scores as they were before it (torch: finite), as for masked_fill."""
    torch.manual_seed(0)
    model, x = InPlaceMask(), torch.randn(2, 4, 8)
    keep = torch.arange(4)[None, :] < torch.tensor([3, 0])[:, None]
    scores = model.q(x) @ model.k(x).transpose(1, 2) / 8 ** 0.5
    assert torch.isfinite(scores).all()  # no overflow before the fill
    assert torch.isnan(torch.softmax(scores.masked_fill(~keep[:, None, :], float("-inf")), dim=-1)).any()
    result = gradcli.grads(model, x, loss="out.sum()")
    finding = next(f for p in result.params for f in p.findings if f.flag == "NONFINITE")
    assert "your own -inf constant (not an overflow) in masked_fill_" in finding.reason
    assert "the nan is born in softmax" in finding.reason
    forward = gradcli.trace(f"{__file__}:InPlaceMask", ["x=randn(2,4,8)"], loss="out.sum()", seed=0, flow=True).forward_nonfinite
    assert (forward["call"], forward["kind"], forward["written"]) == ("masked_fill_", "inf", True)


def test_an_in_place_fill_is_the_user_s_constant_only_if_its_target_was_finite_before():
    """After masked_fill_ its target holds the -inf: the recorder asks it before the call. Here
    the targets as torch holds them before the fill, one finite and one overflowed (float32),
    and after it. (Not through a model: every call that could make the overflowed target is
    itself recorded first, and an input filled in place is seen filled by gradcli's rerun of
    forward: docs/mutation.md.)"""
    from gradcli.targets.nonfinite_calls import written_nonfinite

    mask = torch.tensor([False, True, False])
    for target in (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1e30, 2.0, 3.0]) * 1e10):
        finite_before = bool(torch.isfinite(target).all())
        filled = target.clone().masked_fill_(mask, float("-inf"))
        assert not torch.isfinite(filled).all()  # after the call: no longer tells
        assert written_nonfinite("masked_fill_", [filled, mask, float("-inf")], finite_before) is finite_before
    assert written_nonfinite("masked_fill", [torch.ones(3), mask, float("-inf")]) is True  # out of place: as before
