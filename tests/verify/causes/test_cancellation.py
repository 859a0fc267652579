"""issue 15 on user code: a model whose loss and gradients are finite but whose gradient loses
its digits to cancellation is diagnosed at the right node and source line, against the exact
gradient (verify/causes/cancellation.py, exact/replay.py).

Each model is a real torch.nn module written here; its source line is this file's line
ending in `# marker`."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import gradcli
from gradcli.verify.causes.run import explain_cancellation
from gradcli.words import problem_sentences
from paths import ROOT

APPROACHING = [[0.1], [1e-3], [1e-5], [1e-7]]  # points approaching h = 0, where the parts cancel


def _line(marker: str) -> int:
    with open(__file__, encoding="utf-8") as handle:
        return next(i for i, text in enumerate(handle, start=1) if text.rstrip().endswith(f"# {marker}"))


class Identity(nn.Module):
    """h = x through a linear layer fixed at weight 1, bias 0: the parameters' gradients
    depend on the gradient arriving at h."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(1, 1)
        with torch.no_grad():
            self.fc.weight.fill_(1.0)
            self.fc.bias.fill_(0.0)


class Expm1OverX(Identity):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return ((torch.exp(h) - 1) / h).sum()  # exp-minus-one


class OneMinusCos(Identity):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return ((1 - torch.cos(h)) / h**2).sum()  # one-minus-cos


class Swish(Identity):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return (h * torch.sigmoid(h)).sum()


class Expm1Rewritten(Identity):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return (torch.expm1(h) / h).sum()


def _explain(model: nn.Module, values: list[list[float]], dtype: torch.dtype) -> object:
    model = model.to(dtype)
    x = torch.tensor(values, dtype=dtype)
    return explain_cancellation(lambda: model(x), dict(model.named_parameters()))


def test_exp_minus_one_over_h_is_cancellation_at_its_line() -> None:
    cause = _explain(Expm1OverX(), APPROACHING, torch.float64)
    assert cause is not None and cause.kind == "cancellation"
    assert cause.node == "SubBackward0"
    assert cause.source.startswith(f"test_cancellation.py:{_line('exp-minus-one')}: return ((torch.exp(h) - 1) / h)")
    assert cause.derivative == "fc.weight, fc.bias"
    # the two parts that meet at h, from the two uses of h on that line, nearly opposite (±1/h)
    assert [f["node"] for f in cause.factors] == ["ExpBackward0", "DivBackward0"]
    assert [float(f["value"]) for f in cause.factors] == pytest.approx([1e7, -1e7], rel=1e-6)
    # the exact gradient arriving at h: d/dh (e^h - 1)/h = sum n h^(n-1) / (n+1)! (by hand, the
    # series of e^h differentiated term by term; 25 terms are exact in float64 for |h| <= 0.1)
    for example in cause.examples:
        h = example["value"]
        series = sum(n * h ** (n - 1) / math.factorial(n + 1) for n in range(1, 25))
        assert example["exact"] == pytest.approx(series, rel=1e-14)
    # the relative error grows as the elements approach h = 0
    errors = [e["relative_error"] for e in cause.examples]
    assert [e["value"] for e in cause.examples] == pytest.approx([0.1, 1e-3, 1e-5, 1e-7])
    assert errors == sorted(errors) and errors[0] < 1e-12 and errors[-1] > 1e-3
    assert "digits lost" in cause.summary and "with 50 digits" in cause.summary


def test_one_minus_cos_in_float32_is_cancellation_at_its_line() -> None:
    cause = _explain(OneMinusCos(), [[0.1], [0.01], [1e-3], [1e-4]], torch.float32)
    assert cause is not None and cause.kind == "cancellation"
    assert cause.node == "RsubBackward1"  # 1 - cos(h): cos(1e-4) is 1.0 in float32
    assert cause.source.startswith(f"test_cancellation.py:{_line('one-minus-cos')}:")
    for example in cause.examples:  # d/dh (1 - cos h)/h^2 = sum (-1)^n 2n h^(2n-1) / (2n+2)! (by hand)
        h = example["value"]
        series = sum((-1) ** n * 2 * n * h ** (2 * n - 1) / math.factorial(2 * n + 2) for n in range(1, 15))
        assert example["exact"] == pytest.approx(series, rel=1e-6)  # h is float32's value of 0.1, 0.01 ...
    assert "7 of 7 float32 digits lost" in cause.summary


@pytest.mark.parametrize("model, values", [
    (Swish(), APPROACHING),  # h used twice, parts of one sign: nothing cancels
    (Expm1Rewritten(), APPROACHING),  # the parts still meet, but each is accurate to its last digit
    (Expm1OverX(), [[0.5], [1.0], [2.0]]),  # away from 0 the cancellation costs a digit or two at most
])
def test_no_claim_without_the_exact_value_showing_it(model: nn.Module, values: list[list[float]]) -> None:
    assert _explain(model, values, torch.float64) is None


def test_trace_flow_on_the_example_model_exits_1_naming_the_line(monkeypatch) -> None:
    monkeypatch.chdir(str(ROOT))
    result = gradcli.trace("examples/nan_causes.py:Cancellation", ["x=[[0.1], [0.001], [1e-5], [1e-7]]"],
                           flow=True, dtype="float64", seed=0)
    assert result.nonfinite_origin is None and result.cause.kind == "cancellation"
    with open("examples/nan_causes.py", encoding="utf-8") as handle:
        line = next(i for i, text in enumerate(handle, start=1) if text.rstrip().endswith("# cancellation"))
    assert result.cause.source.startswith(f"nan_causes.py:{line}:")
    assert any("finite but inaccurate: cancellation" in p for p in problem_sentences(result.problems))
    # away from the spot the same model is fine, and trace says nothing more
    fine = gradcli.trace("examples/nan_causes.py:Cancellation", ["x=[[0.5], [1.0]]"], flow=True, dtype="float64",
                         seed=0)
    assert fine.cause is None and not fine.problems


def test_the_replay_refuses_what_it_does_not_know() -> None:
    """A call outside the replay (here cumsum) means no exact value and so no claim."""

    class Unknown(Identity):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            return (torch.cumsum(torch.exp(h) - 1, dim=0) / h).sum()

    assert _explain(Unknown(), APPROACHING, torch.float64) is None


def test_relative_error_is_measured_against_fifty_digits() -> None:
    """The figure in the summary: at h = 1e-7 float64 keeps about 2 of its 16 digits."""
    cause = _explain(Expm1OverX(), APPROACHING, torch.float64)
    worst = max(cause.examples, key=lambda e: e["relative_error"])
    assert worst["value"] == pytest.approx(1e-7)
    lost = 16 + math.log10(worst["relative_error"])
    assert f"{min(16, lost):.0f} of 16 float64 digits lost" in cause.summary


def expm1_over_x(x: torch.Tensor) -> torch.Tensor:
    return ((torch.exp(x) - 1) / x).sum()  # function-input


def test_parts_meeting_at_a_function_input_are_seen_at_the_leaf() -> None:
    """A function's own input used twice: the parts meet at the leaf, not at a node."""
    x = torch.tensor([0.1, 1e-3, 1e-5, 1e-7], dtype=torch.float64, requires_grad=True)
    cause = explain_cancellation(lambda: expm1_over_x(x), {"x": x})
    assert cause is not None and cause.kind == "cancellation" and cause.derivative == "x"
    assert "the gradient arriving at x is the sum of" in cause.summary
    assert cause.source.startswith(f"test_cancellation.py:{_line('function-input')}:")
    assert [e["element"] for e in cause.examples] == ["[0]", "[1]", "[2]", "[3]"]
