"""`gradcli compare --compile` when what dynamo captured differs from eager: a model whose
forward takes another path while dynamo traces it (`torch.compiler.is_compiling()`, as
libraries do for a fast path). No random draw is involved, so the cause is the capture.
Dynamo's `eager` backend runs the captured graph with plain torch ops: torch's own gradients
under it, computed here, are the truth of the capture's number."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import gradcli


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class TracedPath(Plain):
    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if torch.compiler.is_compiling():
            h = h * 0.5
        return self.fc2(h)


def square(out):
    return out.pow(2).mean()


def hooked(cls: type[nn.Module] = TracedPath) -> tuple[nn.Module, torch.Tensor]:
    """The model with a forward pre-hook on itself and a backward hook on its last layer:
    hooks that do nothing, which the capture cause lists as places to look."""
    torch.manual_seed(0)
    model = cls()
    model.register_forward_pre_hook(lambda module, args: None)
    model.fc2.register_full_backward_hook(lambda module, grad_input, grad_output: None)
    return model, torch.randn(4, 8)


def torch_grads(model: nn.Module, x: torch.Tensor, backend: str | None = None) -> list[torch.Tensor]:
    import torch._dynamo

    torch._dynamo.reset()
    work = copy.deepcopy(model)
    fn = torch.compile(work, backend=backend) if backend else work
    grads = torch.autograd.grad(square(fn(x)), list(work.parameters()))
    torch._dynamo.reset()
    return [g.double() for g in grads]


def worst_rel_err(candidate: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    return max(float(torch.linalg.vector_norm(c - r) / torch.linalg.vector_norm(r)) for c, r in zip(candidate, reference))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_graph_dynamo_captured_differently_is_the_capture_cause(backend):
    model, x = hooked()
    eager_backend_err = worst_rel_err(torch_grads(model, x, "eager"), torch_grads(model, x))
    assert eager_backend_err > 0.1, "the premise: torch's compiled run under dynamo's eager backend differs"
    result = gradcli.compare(model, x, loss=square, compile=True, backend=backend)
    assert not result.ok
    assert [c.kind for c in result.causes] == ["capture"]  # no random draw, no graph break
    assert result.causes[0].detail == {"eager_backend_rel_err": pytest.approx(eager_backend_err, rel=1e-9),
                                       "hooks": ["(model): forward pre hooks", "fc2: backward hooks"]}
    assert (f"capture: dynamo's eager backend (the captured graph, no compiler) differs too ({eager_backend_err:.2e}): "
            "a hook or Python side effect the compiled graph did not replay "
            "(hooks on: (model): forward pre hooks, fc2: backward hooks)") in str(result)


def test_the_same_model_without_the_traced_path_has_no_capture_cause():
    """compiled and eager agree (torch says so here), so compare finds nothing to explain."""
    model, x = hooked(Plain)
    assert worst_rel_err(torch_grads(model, x, "eager"), torch_grads(model, x)) < 1e-6, "the premise: no difference"
    result = gradcli.compare(model, x, loss=square, compile=True, backend="eager")
    assert result.ok and not result.causes, str(result)


class Refused(Plain):
    """A forward that raises: torch._dynamo.explain raises with it."""

    def forward(self, x):
        raise ValueError("this forward takes no input of that kind")


def test_explain_raising_is_a_graph_breaks_cause_with_torch_s_own_error():
    """What explain raises is told as it is, with no count of graphs or breaks (json.md's
    graph-breaks cause); the model's random state is the run's."""
    from types import SimpleNamespace

    import torch._dynamo

    from gradcli.comparison.causes import _graph_breaks
    from gradcli.comparison.result import Cause

    model, x = Refused(), torch.ones(1, 8)
    torch._dynamo.reset()
    with pytest.raises(Exception) as raised:
        torch._dynamo.explain(copy.deepcopy(model))(x)
    torch._dynamo.reset()
    runs = SimpleNamespace(model=model, rng_state=torch.random.get_rng_state(), args=(x,), kwargs={})
    assert _graph_breaks(runs) == Cause("graph-breaks", {
        "graphs": None, "breaks": None, "reasons": [f"explain raised {type(raised.value).__name__}: {raised.value}"]})


class RefusedWhileTraced(Plain):
    """A forward that raises only while dynamo traces it: dynamo gives up on the frame and runs it eagerly."""

    def forward(self, x):
        if torch.compiler.is_compiling():
            raise ValueError("not while traced")
        return self.fc2(torch.relu(self.fc1(x)))


def test_a_model_dynamo_captures_no_graph_of_has_no_graph_breaks_cause():
    """torch's explain counts 0 graphs and graph_count - 1 = -1 breaks: no break to tell (it was
    a cause of "-1 breaks")."""
    from types import SimpleNamespace

    import torch._dynamo

    from gradcli.comparison.causes import _graph_breaks

    model, x = RefusedWhileTraced(), torch.ones(1, 8)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(copy.deepcopy(model))(x)
    torch._dynamo.reset()
    assert (explained.graph_count, explained.graph_break_count, explained.break_reasons) == (0, -1, [])
    runs = SimpleNamespace(model=model, rng_state=torch.random.get_rng_state(), args=(x,), kwargs={})
    assert _graph_breaks(runs) is None
