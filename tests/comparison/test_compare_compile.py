"""`gradcli compare --compile`: few compile runs, tiny models, shared through module fixtures.

aot_eager needs no compiler and replays eager's operations, random draws included; inductor
(skipped without a C++ compiler) generates its own kernels and draws its own random numbers.
The truth of each case is torch.compile run here, in the test."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import gradcli
from machine import inductor_refuses


@pytest.fixture
def compiler():
    """Skip with torch's own reason when inductor cannot compile C++ on this machine (asked at
    setup, not at collection: importing inductor's builder costs seconds)."""
    if refused := inductor_refuses():
        pytest.skip(refused)


class Composite(nn.Module):
    """The four healthy models in one, so that one compile covers them: a CNN with
    BatchNorm, an LSTM, a Transformer layer and an MLP head."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.lstm = nn.LSTM(4, 8, batch_first=True)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        seq, _ = self.lstm(h.flatten(2).transpose(1, 2))
        return self.mlp(self.layer(seq).mean(1))


class WithDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.drop, self.fc2 = nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 2)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def square(out):
    return out.pow(2).mean()


def grads(model, x, *, backend=None, seed=0):
    """torch's own gradients: eager, or torch.compile with `backend`, from the same seed."""
    import torch._dynamo

    torch._dynamo.reset()
    work = copy.deepcopy(model)
    fn = torch.compile(work, backend=backend) if backend else work
    torch.manual_seed(seed)
    return [g.double() for g in torch.autograd.grad(square(fn(x)), list(work.parameters()))]


def rel(a, b):
    return max(float(torch.linalg.vector_norm(x - y) / torch.linalg.vector_norm(y)) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def composite():
    torch.manual_seed(0)
    return Composite(), torch.randn(4, 1, 4, 4)


@pytest.fixture(scope="module")
def dropout():
    torch.manual_seed(0)
    return WithDropout(), torch.randn(16, 8)


def test_healthy_models_agree_under_aot_eager(composite):
    model, x = composite
    result = gradcli.compare(model, x, loss=square, compile=True, backend="aot_eager")
    assert result.ok, str(result)


def test_dropout_under_aot_eager_draws_eagers_masks_and_agrees(dropout):
    model, x = dropout
    torch.manual_seed(0)
    result = gradcli.compare(model, x, loss=square, compile=True, backend="aot_eager")
    assert rel(grads(model, x, backend="aot_eager"), grads(model, x)) == 0  # torch: the same masks
    assert result.ok, str(result)


def test_healthy_models_agree_under_inductor(compiler, composite):
    model, x = composite
    result = gradcli.compare(model, x, loss=square, compile=True, backend="inductor")
    assert result.ok, str(result)


def test_dropout_under_inductor_differs_and_the_cause_is_the_random_draws(compiler, dropout):
    model, x = dropout
    assert rel(grads(model, x, backend="inductor"), grads(model, x)) > 0.1  # torch: other masks
    evaluated = copy.deepcopy(model).eval()
    assert rel(grads(evaluated, x, backend="inductor"), grads(evaluated, x)) < 1e-5  # torch: no draws, same gradients
    torch.manual_seed(0)
    result = gradcli.compare(model, x, loss=square, compile=True, backend="inductor")
    assert not result.ok
    kinds = [c.kind for c in result.causes]
    assert kinds[0] == "random-ops" and "capture" not in kinds
    cause = result.causes[0].detail
    assert cause["eval_agrees"] and cause["modules"] == ["drop (Dropout)"]
    assert result.first_divergence.forward_differs and result.first_divergence.first_forward == "drop (Dropout)"
    assert "in eval mode the candidate agrees" in str(result)


class BrokenGraph(WithDropout):
    """WithDropout with a graph break between its layers (dynamo compiles two graphs)."""

    def forward(self, x):
        h = self.drop(torch.relu(self.fc1(x)))
        torch._dynamo.graph_break()
        return self.fc2(h)


def test_a_graph_break_is_told_with_dynamos_own_count_and_reason(compiler):
    """Under inductor the dropout's draws differ, so compare looks for causes; dynamo's own
    explain() of the model, run here, is the truth for the graphs, the breaks and the reason."""
    import torch._dynamo

    torch.manual_seed(0)
    model, x = BrokenGraph(), torch.randn(16, 8)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(copy.deepcopy(model))(x)
    torch._dynamo.reset()
    assert explained.graph_break_count >= 1, "the premise: dynamo breaks the graph"
    torch.manual_seed(0)
    result = gradcli.compare(model, x, loss=square, compile=True, backend="inductor")
    assert not result.ok
    (breaks,) = [c.detail for c in result.causes if c.kind == "graph-breaks"]
    assert (breaks["graphs"], breaks["breaks"]) == (explained.graph_count, explained.graph_break_count)
    first_reasons = {str(getattr(r, "reason", r)).strip().splitlines()[0] for r in explained.break_reasons}
    assert set(breaks["reasons"]) == first_reasons and len(breaks["reasons"]) == len(first_reasons)


class Offset(nn.Module):
    """A LayerNorm over values far from zero (a bias of 1e4, spread ~1): (x - mean) cancels
    most of float32's digits, so how the mean and variance are summed shows in every gradient.
    No random draw, no hook, one graph: only the arithmetic can differ."""

    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 2)
        with torch.no_grad():
            self.fc1.bias.fill_(1e4)

    def forward(self, x):
        return self.fc2(self.norm(self.fc1(x)))


@pytest.mark.slow  # an inductor compile: ~15 to 40 s here
def test_inductor_s_arithmetic_alone_is_not_blamed_on_the_capture(compiler):
    """torch: dynamo's eager backend gives eager's gradients bit for bit, inductor's kernels
    other ones (its own sums, beyond float32's rounding). What dynamo captured is sound, so
    compare, rerunning under the eager backend, names no `capture` cause (rerunning under the
    candidate's own backend would find the difference again and blame the capture)."""
    torch.manual_seed(0)
    model, x = Offset(), torch.randn(16, 8)
    eager = grads(model, x)
    assert all(torch.equal(a, b) for a, b in zip(grads(model, x, backend="eager"), eager))
    assert rel(grads(model, x, backend="inductor"), eager) > 1e3 * torch.finfo(torch.float32).eps

    result = gradcli.compare(model, x, loss=square, compile=True, backend="inductor")
    assert not result.ok and any(not p.agrees for p in result.parameters)
    assert "capture" not in [c.kind for c in result.causes]
