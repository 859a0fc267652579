"""issue 15 on user code: a real torch.nn model whose loss gradient goes nan through each
cause is diagnosed at the right node and the right source line (verify/causes/run.py).

The source line is this file's own line that created the node (anomaly mode's traceback)."""

from __future__ import annotations

import torch
from torch import nn

from gradcli.verify.causes.run import explain_nonfinite
from paths import ROOT


def _line(marker: str) -> int:
    """The line number of this file's line ending in `# marker`."""
    with open(__file__, encoding="utf-8") as handle:
        return next(i for i, text in enumerate(handle, start=1) if text.rstrip().endswith(f"# {marker}"))


class Layer(nn.Module):
    """A linear layer with weights fixed so that its outputs are 0, negative or huge."""

    def __init__(self, weight: list[float], bias: list[float]) -> None:
        super().__init__()
        self.lin = nn.Linear(1, len(weight))
        with torch.no_grad():
            self.lin.weight.copy_(torch.tensor(weight).reshape(-1, 1))
            self.lin.bias.copy_(torch.tensor(bias))


class SafeSqrt(Layer):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.where(h > 0, torch.sqrt(h), torch.zeros_like(h))  # leak


class Softplus(Layer):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.log(1 + torch.exp(h))  # overflow


class PowerOfSqrt(Layer):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.sqrt(h) ** 3  # zero-times-inf


class Difference(Layer):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.sqrt(h) - 2 * torch.sqrt(h)  # inf-minus-inf


def _diagnose(model: nn.Module) -> object:
    x = torch.ones(4, 1)
    cause = explain_nonfinite(lambda: model(x).sum(), dict(model.named_parameters()))
    assert cause is not None
    return cause


def test_leaked_branch_in_a_model() -> None:
    cause = _diagnose(SafeSqrt([1.0, -1.0], [0.5, -2.0]))
    assert cause.kind == "leaked_branch" and cause.node == "SqrtBackward0"
    assert cause.source.startswith(f"test_run_causes.py:{_line('leak')}: return torch.where")


def test_overflow_in_a_model() -> None:
    cause = _diagnose(Softplus([1.0, 1000.0], [0.0, 0.0]))
    assert cause.kind == "overflow" and cause.node == "ExpBackward0"
    assert cause.source.startswith(f"test_run_causes.py:{_line('overflow')}:")
    assert [f["value"] for f in cause.factors] == ["0", "inf"]


def test_zero_times_inf_in_a_model() -> None:
    cause = _diagnose(PowerOfSqrt([1.0, 1.0], [-1.0, 0.0]))  # h = x - 1 is exactly 0 at x = 1
    assert cause.kind == "zero_times_inf" and cause.node == "SqrtBackward0"
    assert cause.source.startswith(f"test_run_causes.py:{_line('zero-times-inf')}:")


def test_inf_minus_inf_in_a_model() -> None:
    cause = _diagnose(Difference([1.0, 1.0], [-1.0, 0.0]))
    assert cause.kind == "inf_minus_inf"
    values = sorted(f["value"] for f in cause.factors)
    assert values == ["-inf", "inf"]


def test_a_finite_model_has_no_cause() -> None:
    model = Softplus([1.0, 2.0], [0.0, 0.0])
    assert explain_nonfinite(lambda: model(torch.ones(4, 1)).sum(), dict(model.named_parameters())) is None


def test_trace_flow_names_the_cause_at_the_origin() -> None:
    import gradcli

    leaked = gradcli.trace("where(x > 0, sqrt(x), 0).sum()", ["x=[-1.0, 1.0]"], flow=True)
    assert leaked.nonfinite_origin is not None and leaked.cause.kind == "leaked_branch"
    assert leaked.cause.source == "sqrt(x)"
    overflow = gradcli.trace("log(1+exp(x)).sum()", ["x=[800.0, 1.0]"], flow=True)
    assert overflow.cause.kind == "overflow" and overflow.cause.source == "exp(x)"
    assert "exact derivative" not in overflow.cause.summary  # trace computes none: it claims none
    own = gradcli.trace("sqrt(x).sum()", ["x=[0.0, 1.0]"], flow=True)
    assert own.cause.kind == "undefined" and not own.cause.is_bug
    finite = gradcli.trace("sin(x).sum()", ["x=[0.0, 1.0]"], flow=True)
    assert finite.cause is None


def test_a_target_that_builds_its_own_leaves() -> None:
    """`run()` may make its leaves itself (as a code target's build does) and return them."""

    def build() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model = SafeSqrt([1.0, -1.0], [0.5, -2.0])
        return model(torch.ones(4, 1)).sum(), dict(model.named_parameters())

    cause = explain_nonfinite(build, None, origin_of=lambda node: "model.py:7: h.sqrt()")
    assert cause is not None and cause.kind == "leaked_branch" and cause.source == "model.py:7: h.sqrt()"


import pytest  # noqa: E402 - the code-target tests below are the issue's "your own code" half

MODELS = "examples/nan_causes.py"


@pytest.mark.parametrize("name, kind, node", [
    ("LeakedBranch", "leaked_branch", "SqrtBackward0"),
    ("Overflow", "overflow", "ExpBackward0"),
    ("ZeroTimesInf", "zero_times_inf", "SqrtBackward0"),
    ("InfMinusInf", "inf_minus_inf", None),
    ("Undefined", "undefined", "SqrtBackward0"),
])
def test_trace_flow_on_a_model_file_names_the_cause_and_line(name: str, kind: str, node: str | None, monkeypatch) -> None:
    import gradcli

    monkeypatch.chdir(str(ROOT))
    result = gradcli.trace(f"{MODELS}:{name}", ["x=ones(4,1)"], flow=True, seed=0)
    cause = result.cause
    assert cause is not None and cause.kind == kind, cause
    if node is not None:
        assert cause.node == node
    with open(MODELS, encoding="utf-8") as handle:
        line = next(i for i, text in enumerate(handle, start=1) if text.rstrip().endswith(f"# {kind}"))
    located = [cause.source, *(f.get("source") for f in cause.factors)]
    assert any(s and s.startswith(f"nan_causes.py:{line}:") for s in located), located
