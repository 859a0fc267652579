"""gradcli.grads on real torch.nn models: every fault in examples/grads/ diagnosed with the
right flag, parameter and reason (and line), the healthy models without a flag, the numbers
equal to a hand-written backward, and the user's model left as it was."""

from __future__ import annotations

import copy
import math
import dataclasses
import sys
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import gradcli
from gradcli.errors import UsageError
from gradcli.health.result import ParamHealth
from gradcli.health.thresholds import Thresholds
from gradcli.health.verdicts import size_findings
from paths import ROOT

EXAMPLES = ROOT / "examples" / "grads"
sys.path.insert(0, str(EXAMPLES))
import faults  # noqa: E402
import healthy  # noqa: E402
from gradcli.words import problem_sentences  # noqa: E402

FAULTS = (EXAMPLES / "faults.py").read_text().splitlines()


def line_of(text: str) -> int:
    """The 1-based line of faults.py holding `text` (exactly one does)."""
    found = [k + 1 for k, line in enumerate(FAULTS) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def mean_square(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def run(model: nn.Module, *inputs: torch.Tensor, **options):
    torch.manual_seed(0)
    return gradcli.grads(model, *(inputs or (torch.randn(16, 8),)), loss=mean_square, **options)


def flags(result) -> dict[str, list[str]]:
    return {p.name: p.flags for p in result.params}


def only_finding(result, name: str):
    (param,) = [p for p in result.params if p.name == name]
    assert len(param.findings) == 1, param.findings
    return param.findings[0]


# -- NO GRAD: the cause, found in forward ----------------------------------------------------------

def test_detached_branch_names_the_detach_and_its_line():
    torch.manual_seed(0)
    result = run(faults.DetachedBranch())
    assert flags(result) == {
        "main.weight": [], "main.bias": [], "skip.weight": ["NO GRAD"], "skip.bias": ["NO GRAD"],
        "head.weight": [], "head.bias": [],
    }
    finding = only_finding(result, "skip.weight")
    assert "only through .detach()" in finding.reason
    assert finding.source.line == line_of("skip = self.skip(x).detach()")
    assert not result.ok
    assert problem_sentences(result.problems)[0].startswith("skip.weight: NO GRAD: its output reaches the loss only through .detach()")


def test_layer_never_called_is_no_grad_because_it_never_ran():
    result = run(faults.UnusedLayer())
    assert flags(result)["extra.weight"] == ["NO GRAD"] and flags(result)["extra.bias"] == ["NO GRAD"]
    assert only_finding(result, "extra.weight").reason == "its module `extra` (Linear) never ran in forward"
    assert [p.name for p in result.params][-2:] == ["extra.weight", "extra.bias"]  # unused: last
    assert sum(1 for p in result.params if p.flags) == 2


def test_layer_under_no_grad_names_the_call():
    result = run(faults.NoGradEncoder())
    finding = only_finding(result, "encoder.bias")
    assert finding.flag == "NO GRAD" and finding.reason.startswith("it ran under torch.no_grad()")
    assert finding.source.line == line_of("features = self.encoder(x)")
    assert flags(result)["head.weight"] == []


def test_data_in_forward_names_the_data_access():
    result = run(faults.DataInForward())
    finding = only_finding(result, "first.weight")
    assert finding.flag == "NO GRAD" and "only through .data" in finding.reason
    assert finding.source.line == line_of("return self.second(h.data)")
    assert flags(result)["second.weight"] == []


class NumpyRoundTrip(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 1)

    def forward(self, x):
        h = torch.from_numpy(self.a(x).detach().numpy() * 2)  # the round trip
        return self.b(h)


class ItemScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Linear(4, 1)
        self.b = nn.Linear(4, 1)

    def forward(self, x):
        factor = self.scale(x).mean().item()  # a Python number
        return self.b(x) * factor


class ArgmaxPick(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(4, 3)
        self.experts = nn.Linear(4, 3)

    def forward(self, x):
        choice = self.router(x).argmax(dim=1, keepdim=True)  # an integer result
        return self.experts(x).gather(1, choice)


class OutputDropped(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 1)
        self.wasted = nn.Linear(4, 1)

    def forward(self, x):
        self.wasted(x)  # computed, then thrown away
        return self.used(x)


@pytest.mark.parametrize(("model", "param", "words", "code"), [
    (NumpyRoundTrip, "a.weight", "a numpy round trip", "h = torch.from_numpy("),
    (ItemScale, "scale.weight", "only through item() (a Python number)", "factor = self.scale(x).mean().item()"),
    (ArgmaxPick, "router.weight", "only through argmax, whose result is an integer tensor", "choice = self.router(x)"),
])
def test_every_kind_of_cut_is_named_with_its_line(model, param, words, code):
    torch.manual_seed(0)
    result = gradcli.grads(model(), torch.randn(8, 4), loss=mean_square)
    finding = only_finding(result, param)
    assert finding.flag == "NO GRAD" and words in finding.reason
    assert finding.source.code.startswith(code) and finding.source.file == __file__


def test_output_computed_and_dropped():
    result = gradcli.grads(OutputDropped(), torch.randn(8, 4), loss=mean_square)
    assert only_finding(result, "wasted.weight").reason == "it was used in forward, but nothing computed from it reached the loss"
    assert flags(result)["used.weight"] == []


def test_frozen_backbone_is_listed_apart_and_not_a_problem():
    result = run(faults.FrozenBackbone())
    assert result.ok and result.problems == [] and result.warnings == []
    assert [p.name for p in result.frozen] == ["backbone.0.weight", "backbone.0.bias", "backbone.2.weight", "backbone.2.bias"]
    assert all(p.grad_norm is None and not p.findings for p in result.frozen)
    assert [p.name for p in result.judged] == ["head.weight", "head.bias"]


# -- ZERO, NONFINITE, VANISHING, EXPLODING ------------------------------------------------------

def test_dead_relu_layer_and_its_neighbours_are_zero_naming_the_relu():
    result = run(faults.DeadReLU())
    assert flags(result) == {
        "inp.weight": ["ZERO"], "inp.bias": ["ZERO"], "hidden.weight": ["ZERO"], "hidden.bias": ["ZERO"],
        "out.weight": ["ZERO"], "out.bias": [],
    }
    dead_line = line_of("h = torch.relu(self.hidden(h))")
    hidden = only_finding(result, "hidden.weight")
    assert hidden.reason.startswith("the relu right after it is dead (outputs only zeros)")
    assert hidden.source.line == dead_line
    assert only_finding(result, "inp.weight").reason.startswith("the relu after it is dead")
    out = only_finding(result, "out.weight")
    assert out.reason.startswith("its input is all zeros, from a dead relu") and out.source.line == dead_line
    assert result.ok  # ZERO fails only with strict
    assert not run(faults.DeadReLU(), strict=True).ok


class SaturatedGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)
        with torch.no_grad():
            self.gate.bias.fill_(50.0)  # sigmoid(50) is exactly 1.0 in float32

    def forward(self, x):
        return self.out(x * torch.sigmoid(self.gate(x)))


def test_a_saturated_sigmoid_is_named():
    result = gradcli.grads(SaturatedGate(), torch.randn(8, 4), loss=mean_square)
    assert flags(result) == {"gate.weight": ["ZERO"], "gate.bias": ["ZERO"], "out.weight": [], "out.bias": []}
    finding = only_finding(result, "gate.weight")
    assert finding.reason.startswith("the sigmoid right after it is saturated (outputs only 0 and 1)")
    assert finding.source.code == "return self.out(x * torch.sigmoid(self.gate(x)))"


def mse_to(target: torch.Tensor):
    return lambda out: ((out - target) ** 2).mean()


@pytest.mark.parametrize(("model", "flag"), [(faults.ExplodingMLP, "EXPLODING"), (faults.VanishingMLP, "VANISHING")])
def test_forty_layer_mlp_with_large_or_tiny_init(model, flag):
    torch.manual_seed(0)
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    result = gradcli.grads(model(), x, loss=mse_to(y))
    weights = [p for p in result.params if p.name.endswith("weight")]
    assert len(weights) == 40 and all(p.flags == [flag] for p in weights)
    # Zero-initialised biases are measured against their layer: the first ones are flagged
    # too; near the output a bias's gradient does not pass through the layers and is fine.
    assert result.params[1].name == "layers.0.bias" and result.params[1].flags == [flag]
    assert {f for p in result.params for f in p.flags} == {flag}
    assert result.ok and not gradcli.grads(model(), x, loss=mse_to(y), strict=True).ok


def test_he_initialised_forty_layer_mlp_is_healthy():
    torch.manual_seed(0)
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    result = gradcli.grads(faults.DeepMLP(), x, loss=mse_to(y), strict=True)
    assert result.ok and not any(p.findings for p in result.params)


def test_log_of_zero_in_the_loss_is_nonfinite_with_its_line():
    torch.manual_seed(0)
    result = gradcli.grads(faults.LogOfSoftmax(), torch.randn(16, 8))  # forward returns the loss
    assert flags(result) == {"classifier.weight": ["NONFINITE"], "classifier.bias": ["NONFINITE"]}
    line = line_of("return -torch.log(probs[:, 0]).mean()")
    assert result.origin.backward_node == "LogBackward0" and result.origin.backward_source.line == line
    assert result.origin.forward_op == "log" and result.origin.forward_source.line == line
    finding = only_finding(result, "classifier.weight")
    assert finding.reason.startswith("nan in its gradient; the first non-finite gradient came from LogBackward0")
    assert not result.ok


def test_nonfinite_made_by_a_loss_given_from_python_is_placed_in_the_loss_function():
    model = nn.Linear(3, 2)
    result = gradcli.grads(model, torch.randn(4, 3), loss=lambda out: torch.log(out - out).mean())
    assert all(f == ["NONFINITE"] for f in flags(result).values())
    assert result.origin.backward_node == "LogBackward0"
    assert result.origin.backward_in_loss


@pytest.mark.parametrize("name", ["MLP", "CNN", "LSTM", "Transformer"])
@pytest.mark.parametrize("loss", ["mean_square", "mse", "cross_entropy", "sum"])
def test_healthy_models_get_no_flag_at_default_thresholds(name, loss):
    torch.manual_seed(1)
    model = getattr(healthy, name)()
    x = {"MLP": torch.randn(64, 32), "CNN": torch.randn(16, 3, 16, 16), "LSTM": torch.randn(16, 12, 8),
         "Transformer": torch.randn(16, 10, 32)}[name]
    losses = {
        "mean_square": mean_square,
        "mse": lambda out: nn.functional.mse_loss(out, torch.randn_like(out)),
        "cross_entropy": lambda out: nn.functional.cross_entropy(out, torch.randint(0, out.shape[1], (out.shape[0],))),
        "sum": lambda out: out.pow(2).sum(),
    }
    result = gradcli.grads(model, x, loss=losses[loss], strict=True)
    assert result.ok, str(result)
    assert not any(p.findings for p in result.params)


def param(ratio: float) -> ParamHealth:
    return ParamHealth("w", "", "Linear", (1,), 1, False, 1, param_norm=1.0, reference_norm=1.0, grad_norm=ratio)


@pytest.mark.parametrize(("ratio", "median", "expected"), [
    (1e-8, None, "VANISHING"), (2e-7, None, None), (2e4, None, "EXPLODING"), (9e3, None, None),
    (2e-4, 1.0, None), (0.9e-4, 1.0, "VANISHING"), (2e3, 0.1, "EXPLODING"), (9e2, 0.1, None),
])
def test_size_flags_against_absolute_bounds_and_the_median(ratio, median, expected):
    found = size_findings(param(ratio), Thresholds(), median)
    assert [f.flag for f in found] == ([expected] if expected else [])


def test_thresholds_are_configurable_and_checked():
    torch.manual_seed(0)
    model, x = healthy.MLP(), torch.randn(64, 32)
    result = gradcli.grads(model, x, loss=mean_square, vanish=1.0, explode=1e9)
    assert all(p.flags == ["VANISHING"] for p in result.params)  # every ratio here is below 1
    for bad in ({"vanish": 0.0}, {"explode": float("inf")}, {"vanish": 10.0, "explode": 1.0}, {"spread": 1.0}):
        with pytest.raises(UsageError):
            gradcli.grads(model, x, loss=mean_square, **bad)


def test_every_run_option_reaches_the_run_and_the_rest_go_to_forward_and_the_loss():
    # The options are defined once, by grads_of's keyword-only parameters; grads() takes them
    # out of its keywords, and the others are forward's inputs or the loss's values.
    import inspect

    from gradcli.health.run import RUN_OPTIONS, grads_of

    assert RUN_OPTIONS == ("steps", "lr", "vanish", "explode", "spread", "strict", "depth")
    assert [p.name for p in inspect.signature(grads_of).parameters.values() if p.kind is p.KEYWORD_ONLY] == list(RUN_OPTIONS)

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x, scale=1.0):
            return self.fc(x) * scale

    torch.manual_seed(0)
    model, x, y = Scaled(), torch.randn(8, 4), torch.randn(8, 2)
    result = gradcli.grads(model, x, loss="((out - y)**2).mean()", y=y, scale=3.0, steps=2, lr=0.05,
                           vanish=1e-9, explode=1e8, spread=1e5, strict=True)
    assert result.thresholds == Thresholds(1e-9, 1e8, 1e5) and result.strict and result.steps.count == 2
    expected = ((model.fc(x) * 3.0 - y) ** 2).mean()  # scale went to forward, y to the loss
    assert result.loss == pytest.approx(expected.item(), rel=1e-6)
    with pytest.raises(UsageError, match="--steps must be 0 or more"):
        gradcli.grads(model, x, loss=mean_square, steps=-1)
    with pytest.raises(UsageError, match="forward takes no input 'stepz'"):
        gradcli.grads(model, x, loss=mean_square, stepz=1)


# -- the numbers, the order, the user's model untouched ------------------------------------------

def test_numbers_equal_a_hand_written_backward():
    torch.manual_seed(0)
    model, x = healthy.MLP(), torch.randn(64, 32)
    twin = copy.deepcopy(model)
    mean_square(twin(x)).backward()
    result = gradcli.grads(model, x, loss=mean_square)
    for p in result.params:
        grad = twin.get_parameter(p.name).grad
        weight = twin.get_parameter(p.name).detach()
        assert p.grad_norm == pytest.approx(grad.norm().item(), rel=1e-5)
        assert p.param_norm == pytest.approx(weight.norm().item(), rel=1e-6)
        assert p.ratio == pytest.approx(grad.norm().item() / weight.norm().item(), rel=1e-5)
        assert p.max_abs == pytest.approx(grad.abs().max().item(), rel=1e-6)
        assert p.mean_abs == pytest.approx(grad.abs().mean().item(), rel=1e-5)
        assert p.zero_share == pytest.approx((grad == 0).float().mean().item(), abs=1e-9)
        assert p.shape == tuple(weight.shape) and p.numel == weight.numel()


class Reversed(nn.Module):
    """Defined last-first, used first-last: rows follow use, not definition."""

    def __init__(self):
        super().__init__()
        self.c = nn.Linear(4, 2)
        self.b = nn.Linear(4, 4)
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


def test_rows_are_in_forward_order():
    result = gradcli.grads(Reversed(), torch.randn(3, 4), loss=mean_square)
    assert [p.name for p in result.params] == ["a.weight", "a.bias", "b.weight", "b.bias", "c.weight", "c.bias"]


class ReadsBeforeUse(Reversed):
    """Looks at c's dtype and shape first: reading a property is not using the parameter."""

    def forward(self, x):
        x = x.to(self.c.weight.dtype).reshape(-1, self.c.weight.shape[1])
        return super().forward(x)


def test_reading_a_property_is_not_a_use():
    result = gradcli.grads(ReadsBeforeUse(), torch.randn(3, 4), loss=mean_square)
    assert [p.name for p in result.params] == ["a.weight", "a.bias", "b.weight", "b.bias", "c.weight", "c.bias"]


def test_the_users_model_grad_and_buffers_are_left_as_they_were():
    torch.manual_seed(0)
    model, x = healthy.CNN(), torch.randn(16, 3, 16, 16)
    before = copy.deepcopy(model.state_dict())
    gradcli.grads(model, x, loss=mean_square, steps=3, lr=0.5)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and BN running stats
    assert all(p.grad is None for p in model.parameters())


def test_steps_record_the_gradient_norm_of_plain_sgd():
    torch.manual_seed(0)
    model, x = healthy.MLP(), torch.randn(64, 32)
    twin = copy.deepcopy(model)
    expected = {name: [] for name, _ in twin.named_parameters()}
    for _ in range(4):
        twin.zero_grad()
        mean_square(twin(x)).backward()
        with torch.no_grad():
            for name, p in twin.named_parameters():
                expected[name].append(p.grad.norm().item())
                p -= 0.1 * p.grad
    result = gradcli.grads(model, x, loss=mean_square, steps=4, lr=0.1)
    assert result.steps.count == 4 and len(result.steps.losses) == 4
    for p in result.params:
        assert p.steps == pytest.approx(expected[p.name], rel=1e-4)


def test_backward_error_is_the_finding():
    class Inplace(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 3)

        def forward(self, x):
            s = torch.sigmoid(self.l(x))
            s.mul_(2)
            return s

    result = gradcli.grads(Inplace(), torch.randn(2, 3), loss=lambda out: out.sum())
    assert not result.ok
    assert problem_sentences(result.problems)[0].startswith("backward raised: one of the variables needed for gradient computation")
    assert not any(p.findings for p in result.params)


def test_a_named_value_nothing_reads_is_refused():
    # gradcli.grads(model, x, loss="out.mean()", seed=3) bound seed as an unused loss variable
    # and ran unseeded; the command line refuses such a --var, and so does Python now.
    with pytest.raises(UsageError, match="forward takes no input 'seed', and the loss does not use it"):
        gradcli.grads(nn.Linear(3, 1), torch.randn(4, 3), loss="out.mean()", seed=3)
    result = gradcli.grads(nn.Linear(3, 1), torch.randn(4, 3), loss="mse_loss(out, y)", y=torch.zeros(4, 1))
    assert result.ok


def test_a_non_scalar_loss_is_refused():
    with pytest.raises(UsageError, match=r"the loss must be a floating-point scalar, and it is a torch.float32 tensor of shape \(4, 2\)"):
        gradcli.grads(nn.Linear(3, 2), torch.randn(4, 3))
    with pytest.raises(UsageError, match="grads needs a torch.nn.Module"):
        gradcli.grads(lambda x: x, torch.randn(3))


def test_json_and_plot_from_python(tmp_path):
    import json

    result = run(faults.DetachedBranch())
    document = json.loads(result.to_json())
    assert document["ok"] is False and document["target"] is None
    assert [p["flags"] for p in document["parameters"]][2:4] == [["NO GRAD"], ["NO GRAD"]]
    written = result.plot(str(tmp_path / "g.svg"))
    assert b"no grad" in (tmp_path / "g.svg").read_bytes() and written.endswith("g.svg")


def test_steps_panel_tick_labels_stay_inside_the_picture():
    # ‖grad‖ within one decade across the steps: matplotlib labels the log axis with minor
    # ticks written 1.25×10^0, wider than the margin, and they (and the axis title) were cut off.
    pytest.importorskip("matplotlib")
    from gradcli.plot.grads import grads_figure

    torch.manual_seed(0)
    result = gradcli.grads(healthy.MLP(), torch.randn(64, 32), loss=mean_square, steps=3, lr=0.1)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = grads_figure(replace(result, depth=0))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    steps_axis = fig.axes[1]
    labels = [t for t in steps_axis.get_yticklabels(which="both") if t.get_visible() and t.get_text()]
    assert labels, "the steps panel's y axis has labelled ticks"
    for text in labels + [steps_axis.yaxis.label]:
        assert text.get_window_extent(renderer).x0 >= 0, text.get_text()


def test_gradcli_grads_is_the_library_result_with_the_renderers_one_layer_up():
    # health/ returns plain data (tests/project/test_layers.py); gradcli.grads adds str, to_json and
    # plot from gradcli/api.py, rendering exactly what the renderers make of the plain result.
    from gradcli.api import Grads
    from gradcli.health.result import GradsResult
    from gradcli.health.run import RUN_OPTIONS, grads_of
    from gradcli.render.formats import render
    from gradcli.render.plain import plain_text
    from gradcli.targets.model import on_python_model

    torch.manual_seed(0)
    model, x = faults.DetachedBranch(), torch.randn(16, 8)
    plain = on_python_model(grads_of, model, (x,), {}, mean_square, RUN_OPTIONS)
    public = gradcli.grads(model, x, loss=mean_square)
    assert type(plain) is GradsResult and type(public) is Grads
    assert not any(hasattr(plain, name) for name in ("to_json", "plot", "_repr_html_"))
    assert public.problems == plain.problems and not public.ok
    # torch: the parameters left without a gradient by a plain backward are the ones named
    work = copy.deepcopy(model)
    mean_square(work(x)).backward()
    assert {p.subject for p in public.problems} == {n for n, p in work.named_parameters() if p.grad is None}
    assert all(p.detail["flag"] == "NO GRAD" for p in public.problems)
    assert str(public) == plain_text(render(plain, "text"))
    assert public.to_json(depth=0) == plain_text(render(replace(plain, depth=0), "json"))


def test_str_is_the_report():
    text = str(run(faults.DetachedBranch()))
    assert text.startswith("grads DetachedBranch: loss ")
    assert "skip.weight, skip.bias: NO GRAD: its output reaches the loss only through .detach() at faults.py:" in text
    assert text.endswith("PROBLEM: 2 NO GRAD (of 6 parameters that should learn)")


@settings(max_examples=15, deadline=None)
@given(depth=st.integers(1, 4), width=st.integers(1, 9), batch=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_numbers_of_random_mlps_equal_a_hand_written_backward(depth, width, batch, seed):
    torch.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    model = nn.Sequential(*layers, nn.Linear(width, 1))
    x = torch.randn(batch, width)
    twin = copy.deepcopy(model)
    twin(x).pow(2).mean().backward()
    result = gradcli.grads(model, x, loss=mean_square)
    assert [p.name for p in result.params] == [name for name, _ in twin.named_parameters()]  # a chain: use order
    for p in result.params:
        grad = twin.get_parameter(p.name).grad
        assert p.grad_norm == pytest.approx(grad.norm().item(), rel=1e-5, abs=1e-12)
        assert p.max_abs == pytest.approx(grad.abs().max().item(), rel=1e-6, abs=1e-12)
        assert p.zero_share == pytest.approx((grad == 0).double().mean().item(), abs=1e-12)


def test_a_model_without_parameters_is_refused_from_python_too():
    from gradcli.errors import UsageError

    with pytest.raises(UsageError, match="ReLU has no parameters: grads judges a model's parameters"):
        gradcli.grads(torch.nn.ReLU(), torch.randn(3))


def test_a_model_whose_every_parameter_is_frozen_is_refused_rather_than_passed():
    """torch computes no gradient for it (nothing requires one): 'OK: all 0 parameters that
    should learn' passed a CI run on nothing."""
    from gradcli.errors import UsageError

    model = nn.Linear(3, 2).requires_grad_(False)
    assert not model(torch.randn(4, 3)).sum().requires_grad, "the premise: torch has no gradient to give"
    with pytest.raises(UsageError, match=r"every parameter of Linear is frozen \(requires_grad=False\)"):
        gradcli.grads(model, torch.randn(4, 3), loss=lambda out: out.sum())


class Overflowing(nn.Module):
    """float32 overflows in forward's multiply: the bias's gradient sums 1e39 (inf in float32)
    over the batch, the weight's sums inf * x over samples whose x differ in sign: inf - inf."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)

    def forward(self, x):
        return self.fc(x) * 1e39


def test_nonfinite_gradients_say_nan_or_inf_as_torch_finds_them_and_where_forward_made_them():
    torch.manual_seed(0)
    model, x = Overflowing(), torch.randn(4, 3)
    work = copy.deepcopy(model)
    work(x).sum().backward()  # torch: which gradients are nan, which inf
    truth = {n: ("nan" if bool(p.grad.isnan().any()) else "inf") for n, p in work.named_parameters()
             if not bool(torch.isfinite(p.grad).all())}
    assert set(truth.values()) == {"nan", "inf"}, "the premise: one of each"
    result = gradcli.grads(model, x, loss=lambda out: out.sum())
    found = {p.subject: p.detail["reason"] for p in result.problems if p.detail.get("flag") == "NONFINITE"}
    assert set(found) == set(truth)
    for name, kind in truth.items():
        assert found[name].startswith(f"{kind} in its gradient; the first non-finite gradient came from MulBackward0 at ")
        assert found[name].endswith("return self.fc(x) * 1e39 (forward's mul on that line already gave nan/inf)")


def test_nonfinite_made_in_the_loss_says_so_once():
    torch.manual_seed(0)
    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    with torch.no_grad():
        assert bool(torch.isneginf(torch.log(model(x) - model(x))).all())  # torch: log(0) = -inf in the loss
    result = gradcli.grads(model, x, loss="log(out - out).sum()")
    reasons = [p.detail["reason"] for p in result.problems if p.detail.get("flag") == "NONFINITE"]
    assert len(reasons) == 2
    for reason in reasons:
        assert reason == ("nan in its gradient; the first non-finite gradient came from LogBackward0 in the loss; "
                          "forward first produced nan/inf in the loss")


class Scaled(nn.Module):
    """A Linear whose output is scaled by `factor`: its gradient scales with it."""

    def __init__(self, factor):
        super().__init__()
        self.fc, self.factor = nn.Linear(8, 4), factor

    def forward(self, x):
        return self.fc(x) * self.factor


@pytest.mark.parametrize(("factor", "flag", "words"), [
    (1e-9, "VANISHING", "‖grad‖/‖param‖ below 1e-07: an SGD step cannot change it"),
    (1e9, "EXPLODING", "‖grad‖/‖param‖ above 10000: one SGD step would dwarf the weights"),
], ids=["vanishing", "exploding"])
def test_a_ratio_beyond_the_absolute_bounds_says_so(factor, flag, words):
    torch.manual_seed(0)
    model, x = Scaled(factor), torch.randn(16, 8)
    work = copy.deepcopy(model)
    work(x).sum().backward()  # torch: every parameter's ‖grad‖/‖param‖ beyond the bound
    ratios = {n: float(p.grad.norm() / p.detach().norm()) for n, p in work.named_parameters()}
    assert all((r < 1e-7) if flag == "VANISHING" else (r > 1e4) for r in ratios.values())
    result = gradcli.grads(model, x, loss=lambda out: out.sum())
    assert {n: [(f.flag, f.reason) for f in p.findings] for n, p in ((p.name, p) for p in result.params)} == {
        n: [(flag, words)] for n in ratios}


@dataclasses.dataclass
class Output:
    logits: torch.Tensor


class LogOfZero(nn.Module):
    """log(0) in forward, the output wrapped as `wrap` says: the nan's node is forward's."""

    def __init__(self, wrap):
        super().__init__()
        self.fc, self.wrap = nn.Linear(3, 2), wrap

    def forward(self, x):
        h = self.fc(x)
        return self.wrap(torch.log(h - h))


def unwrapped(out):
    while not isinstance(out, torch.Tensor):
        out = out["logits"] if isinstance(out, dict) else out.logits if isinstance(out, Output) else out[0]
    return out


@pytest.mark.parametrize("wrap", [
    lambda y: {"logits": y}, lambda y: Output(y), lambda y: [y], lambda y: ((((y,),),),), lambda y: (y, None),
], ids=["dict", "dataclass", "list", "tuples four deep", "a tuple holding None"])
def test_a_nan_made_in_forward_is_not_the_losss_whatever_the_output_holds(wrap):
    torch.manual_seed(0)
    model, x = LogOfZero(wrap), torch.randn(4, 3)
    inner = unwrapped(model(x))
    nodes, pending = set(), [inner.grad_fn]
    while pending:  # torch: the graph forward's output holds
        node = pending.pop()
        nodes.add(node.name())
        pending.extend(n for n, _ in node.next_functions if n is not None)
    assert "LogBackward0" in nodes

    result = gradcli.grads(model, x, loss=lambda out: unwrapped(out).sum())
    assert result.origin.backward_node == "LogBackward0" and result.origin.backward_in_loss is False
    assert result.as_dict()["nonfinite_origin"]["backward_in_loss"] is False


def torch_first_nonfinite_node(loss: torch.Tensor, params) -> str | None:
    """The first node, in the order torch's backward runs them, whose outgoing gradient holds
    nan or inf: torch's own hooks, one per node."""
    first, nodes, pending = [], [], [loss.grad_fn]
    while pending:
        node = pending.pop()
        if node not in nodes:
            nodes.append(node)
            pending.extend(n for n, _ in node.next_functions if n is not None)

    def hook(node):
        return lambda grads_in, grads_out: first.append(node.name()) if not first and any(
            g is not None and not bool(torch.isfinite(g).all()) for g in grads_in) else None

    handles = [node.register_hook(hook(node)) for node in nodes]
    torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True)
    for handle in handles:
        handle.remove()
    return first[0] if first else None


class ExpOverflow(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        # exp(>88) overflows float32: inf
        return torch.exp(self.fc(x) * 100)


def test_a_nan_born_in_the_loss_names_forwards_inf_and_its_line():
    """Forward overflows to inf in exp; the loss's 1/(out - out) makes the nan. The first
    non-finite gradient is the loss's node (no line of the model), and the finding points at
    forward's line instead."""
    torch.manual_seed(0)
    model, x = ExpOverflow(), torch.randn(4, 3)
    work = copy.deepcopy(model)
    with torch.no_grad():
        assert bool(torch.isinf(work(x)).any()) and bool(torch.isfinite(work.fc(x)).all())  # exp makes the inf
    loss = (1 / (work(x) - work(x))).sum()
    node = torch_first_nonfinite_node(loss, list(work.parameters()))
    grads = dict(zip([n for n, _ in work.named_parameters()], torch.autograd.grad(loss, list(work.parameters()))))
    kinds = {n: "nan" if bool(g.isnan().any()) else "inf" for n, g in grads.items()}
    import inspect

    lines, start = inspect.getsourcelines(ExpOverflow.forward)
    line = start + next(k for k, text in enumerate(lines) if "torch.exp" in text)

    result = gradcli.grads(model, x, loss="(1 / (out - out)).sum()")
    assert result.origin.backward_node == node and result.origin.backward_in_loss
    for name, kind in kinds.items():
        finding = only_finding(result, name)
        assert finding.reason.startswith(f"{kind} in its gradient; the first non-finite gradient came from {node} in "
                                         "the loss; forward first produced nan/inf in exp at ")
        assert finding.reason.endswith(f"test_grads.py:{line}  return torch.exp(self.fc(x) * 100)")
        assert finding.source is not None and finding.source.line == line


class SqrtAtZero(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        h = self.fc(x)
        # finite (0) forward; the derivative 1/(2·sqrt(0)) is not
        return torch.sqrt(h - h)


def test_a_gradient_made_nonfinite_by_backward_alone_blames_no_forward_operation():
    torch.manual_seed(0)
    model, x = SqrtAtZero(), torch.randn(4, 3)
    work = copy.deepcopy(model)
    loss = work(x).sum()
    assert bool(torch.isfinite(loss)), "the premise: forward is finite"
    node = torch_first_nonfinite_node(loss, list(work.parameters()))
    import inspect

    lines, start = inspect.getsourcelines(SqrtAtZero.forward)
    line = start + next(k for k, text in enumerate(lines) if "torch.sqrt" in text)
    result = gradcli.grads(model, x, loss=lambda out: out.sum())
    assert result.origin.backward_node == node and result.origin.forward_op is None
    for p in result.params:
        (finding,) = p.findings
        assert "forward first produced" not in finding.reason
        assert finding.reason.endswith(f"came from {node} at test_grads.py:{line}  return torch.sqrt(h - h)")


def test_an_infinite_loss_with_finite_gradients_names_no_backward_node():
    """out.sum() + 1e39 is inf in float32, its gradient (ones) is finite: no node to name."""
    torch.manual_seed(0)
    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    work = copy.deepcopy(model)
    loss = work(x).sum() + 1e39
    assert bool(torch.isinf(loss)) and torch_first_nonfinite_node(loss, list(work.parameters())) is None
    result = gradcli.grads(model, x, loss=lambda out: out.sum() + 1e39)
    document = result.as_dict()
    origin = document["nonfinite_origin"]
    assert (origin["forward_op"], origin["forward_in_loss"], origin["backward_node"]) == ("the loss", True, None)
    # a loss that is no number is no training signal: not ok, though every gradient is finite
    assert bool(torch.isfinite(work(x)).all()), "the premise: forward's output is finite"
    assert not result.ok and document["ok"] is False
    assert document["problems"] == ["loss: NONFINITE: the loss is inf; forward's output is finite: the loss made it"]
    assert document["notes"] == []
    assert all(not p.findings for p in result.params)
    assert str(result).rstrip().endswith(
        "PROBLEM: the loss is inf, though all 2 parameters that should learn get a finite gradient")


def test_a_nan_loss_with_finite_gradients_is_not_ok():
    """Adding a nan constant: the loss is nan, its gradient (ones) finite."""
    torch.manual_seed(0)
    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    nan = torch.tensor(float("nan"))
    work = copy.deepcopy(model)
    loss = work(x).sum() + nan
    grads = torch.autograd.grad(loss, list(work.parameters()))
    assert bool(torch.isnan(loss)) and all(bool(torch.isfinite(g).all()) for g in grads), "the premise"
    result = gradcli.grads(model, x, loss=lambda out: out.sum() + nan)
    assert not result.ok
    assert problem_sentences(result.problems) == [
        "loss: NONFINITE: the loss is nan; forward's output is finite: the loss made it"]


class MinusInfInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x) + torch.log(x.new_zeros(()))


def test_a_minus_inf_loss_from_forward_names_forwards_line_though_the_gradients_are_finite():
    """log(0) = -inf added to a Linear's output: the loss is -inf, each gradient a count of
    rows, finite; the first non-finite forward value is the log's, as torch computes it."""
    torch.manual_seed(0)
    model, x = MinusInfInForward(), torch.randn(4, 3)
    work = copy.deepcopy(model)
    assert bool(torch.isfinite(work.fc(x)).all()) and float(torch.log(x.new_zeros(()))) == float("-inf")
    loss = work(x).sum()
    grads = torch.autograd.grad(loss, list(work.parameters()))
    assert float(loss.detach()) == float("-inf") and all(bool(torch.isfinite(g).all()) for g in grads), "the premise"
    import inspect

    lines, start = inspect.getsourcelines(MinusInfInForward.forward)
    line = start + next(k for k, text in enumerate(lines) if "torch.log" in text)
    result = gradcli.grads(model, x, loss=lambda out: out.sum())
    assert not result.ok and result.loss == float("-inf")
    assert problem_sentences(result.problems) == [
        f"loss: NONFINITE: the loss is -inf; forward first produced inf in log at test_grads.py:{line}  "
        "return self.fc(x) + torch.log(x.new_zeros(()))"]
    assert result.loss_finding.source.line == line
    assert result.loss_finding.flag == "NONFINITE"  # the loss is -inf in torch: not a number to train on
    assert f"loss: NONFINITE: the loss is -inf; forward first produced inf in log at test_grads.py:{line}" in str(result)


def test_a_finite_loss_has_no_loss_finding_and_nonfinite_gradients_keep_the_loss_as_a_note():
    """The loss's own finding is for finite gradients only: when a gradient is non-finite too,
    its NONFINITE says it and the loss's value is a note."""
    torch.manual_seed(0)
    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    healthy = gradcli.grads(model, x, loss=lambda out: out.pow(2).sum())
    assert healthy.ok and healthy.loss_finding is None and math.isfinite(healthy.loss)
    work = copy.deepcopy(model)
    loss = (work(x) * 1e39).sum()
    grads = torch.autograd.grad(loss, list(work.parameters()))
    assert not math.isfinite(float(loss.detach())) and not any(bool(torch.isfinite(g).all()) for g in grads), "the premise"
    both = gradcli.grads(model, x, loss=lambda out: (out * 1e39).sum())
    assert both.loss_finding is None and both.notes == [f"the loss is {float(loss.detach())}"]
    assert [p.flags for p in both.params] == [["NONFINITE"], ["NONFINITE"]]


class OverflowThenNan(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        h = torch.exp(self.fc(x) * 100)
        return h - h


def test_an_overflow_then_a_nan_names_both_and_calls_the_inf_an_overflow():
    """exp overflows to inf (not an -inf the user wrote), then inf - inf is nan on the next
    line: the finding names both operations and their lines, as torch shows them."""
    torch.manual_seed(0)
    model, x = OverflowThenNan(), torch.randn(4, 3)
    with torch.no_grad():
        h = torch.exp(model.fc(x) * 100)
        assert bool(torch.isposinf(h).any()) and bool(torch.isnan(h - h).any()), "the premise: inf, then nan"
    import inspect

    lines, start = inspect.getsourcelines(OverflowThenNan.forward)
    exp_line = start + next(k for k, text in enumerate(lines) if "torch.exp" in text)
    result = gradcli.grads(model, x, loss=lambda out: out.sum())
    for p in result.params:
        (finding,) = p.findings
        assert (f"; forward first produced inf in exp at test_grads.py:{exp_line}  h = torch.exp(self.fc(x) * 100), "
                f"and the nan is born in sub at test_grads.py:{exp_line + 1}  return h - h") in finding.reason
        assert "your own -inf constant" not in finding.reason
