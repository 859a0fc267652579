"""`gradcli compare` without torch.compile: autocast, GradScaler, half weights, the copies,
the CLI and its errors. Every expected value comes from torch run here, in the test."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from torch import nn

import gradcli
from gradcli.comparison.gradients import Flag
from gradcli.errors import GradcliError, UserCodeError, UsageError
from machine import autocast_refuses, lstm_autocast_refuses
from models import CNN, LSTM, MLP, Transformer
from paths import ROOT

TARGET = "examples/compare/models.py:MLP"


HEALTHY = {"MLP": (MLP, (16, 16)), "CNN": (CNN, (8, 3, 6, 6)), "LSTM": (LSTM, (8, 6, 8)), "Transformer": (Transformer, (8, 6, 16))}


def square(out):
    return out.pow(2).mean()


def made(name):
    cls, shape = HEALTHY[name]
    torch.manual_seed(0)
    return cls(), torch.randn(shape)


def torch_grads(model, x, loss, *, amp=None):
    """The parameters' gradients as torch computes them, on a copy."""
    work = copy.deepcopy(model)
    with torch.autocast("cpu", dtype=amp) if amp else torch.autocast("cpu", enabled=False):
        value = loss(work(x))
    trained = {n: p for n, p in work.named_parameters() if p.requires_grad}
    return dict(zip(trained, torch.autograd.grad(value, list(trained.values()))))


@pytest.mark.parametrize("name", list(HEALTHY))
def test_healthy_models_agree_under_bfloat16_autocast(name):
    if name == "LSTM" and (refused := lstm_autocast_refuses(torch.bfloat16)):  # oneDNN on some CPUs cannot
        pytest.skip(f"torch cannot run an LSTM under bfloat16 autocast on this CPU: {refused}")  # build it
    model, x = made(name)
    if refused := autocast_refuses(model, x, torch.bfloat16):
        pytest.skip(f"torch cannot run {name} under bfloat16 autocast on this CPU: {refused}")
    result = gradcli.compare(model, x, loss=square, amp="bfloat16")
    assert result.ok, str(result)
    # and the errors it reports are torch's own: autocast's gradients against eager's
    ref, cand = torch_grads(model, x, square), torch_grads(model, x, square, amp=torch.bfloat16)
    for p in result.parameters:
        diff = torch.linalg.vector_norm((cand[p.name] - ref[p.name]).double())
        assert p.rel_err <= max(float(diff / torch.linalg.vector_norm(ref[p.name].double())), 0) * 1.0001 + 1e-12


@pytest.mark.parametrize("name", ["MLP", "CNN", "Transformer"])
def test_healthy_models_agree_under_float16_autocast_with_a_scaler(name):
    model, x = made(name)
    if refused := autocast_refuses(model, x, torch.float16):  # oneDNN's float16 kernels depend on the CPU too
        pytest.skip(f"torch cannot run {name} under float16 autocast on this CPU: {refused}")
    result = gradcli.compare(model, x, loss=square, amp="float16", scaler=True)
    assert result.ok, str(result)
    assert result.scaler_steps and not result.scaler_steps[-1].skipped


def test_an_lstm_under_float16_autocast_is_refused_by_torch_on_the_cpu_and_said_so():
    model, x = made("LSTM")
    if autocast_refuses(model, x, torch.float16):  # whether torch itself (oneDNN) can run it depends on the CPU
        with pytest.raises(UserCodeError, match=r"the candidate \(autocast\(float16\) \+ GradScaler\) raised"):
            gradcli.compare(model, x, loss=square, amp="float16", scaler=True)
    else:  # a CPU whose oneDNN runs it: compared like any model, no error
        result = gradcli.compare(model, x, loss=square, amp="float16", scaler=True)
        assert {p.name for p in result.parameters} == {name for name, _ in model.named_parameters()}


class Tiny(nn.Module):
    """Small enough that a scaled-down loss underflows in float16 in some layers only."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 2)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def small_loss(out):
    return 1e-6 * out.pow(2).mean()


@pytest.fixture  # per test, not per module: mutmut maps a test to the code its own call runs
def underflow():
    torch.manual_seed(1)
    model, x = Tiny(), torch.randn(16, 8)
    return model, x, gradcli.compare(model, x, loss=small_loss, amp="float16")


def test_float16_underflow_is_flagged_exactly_where_torch_loses_gradients(underflow):
    model, x, result = underflow
    ref, half = torch_grads(model, x, small_loss), torch_grads(model, x, small_loss, amp=torch.float16)
    lost = {n for n in ref if bool(((half[n] == 0) & (ref[n] != 0)).any())}
    assert lost, "the test's premise: torch's float16 run loses gradients"
    assert {p.name for p in result.parameters if Flag.UNDERFLOW in p.flags} == lost
    assert not result.ok


def test_underflow_names_its_cause_and_a_scale_that_keeps_the_gradients(underflow):
    model, x, result = underflow
    cause = next(c for c in result.causes if c.kind == "underflow")
    tiny = torch.finfo(torch.float16).tiny
    assert cause.detail["smallest_lost"] < tiny
    scale = cause.detail["scale"]
    # the least power of two that lifts the smallest lost value to float16's smallest normal
    assert math.log2(scale).is_integer() and cause.detail["smallest_lost"] * scale >= tiny > cause.detail["smallest_lost"] * scale / 2
    assert cause.detail["scale_fits"] and cause.detail["loss_dtype"] == "float16"
    assert "once the loss is float32" in str(result)  # a float16 loss cannot hold a scale above 65504
    # the truth: with the float32 loss multiplied by that scale, torch's own float16 run loses
    # none of the gradient
    ref = torch_grads(model, x, small_loss)
    scaled = torch_grads(model, x, lambda out: small_loss(out.float()) * scale, amp=torch.float16)
    for name, g in ref.items():
        kept = (scaled[name] / scale).double()
        assert float(torch.linalg.vector_norm(kept - g.double()) / torch.linalg.vector_norm(g.double())) < 0.05, name
    assert result.first_divergence is not None and not result.first_divergence.forward_differs
    assert "arises in backward" in str(result)


def _output_grads(model, x, loss):
    """Each Linear's output gradient in torch's float32 run (hooks on a copy)."""
    work, found = copy.deepcopy(model), {}

    def keep(path):
        def hook(module, inputs, out):
            out.register_hook(lambda g: found.__setitem__(path, g.detach().clone()))

        return hook

    for path, module in work.named_modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(keep(path))
    loss(work(x)).backward()
    return found


def test_the_underflow_evidence_holds_torchs_numbers(underflow):
    """The flushed parameters, float16's smallest normal and largest finite number as torch
    knows them, the largest reference gradient (module outputs' and the flushed parameters'),
    and whether the scale fits under float16's largest."""
    model, x, result = underflow
    cause = next(c for c in result.causes if c.kind == "underflow")
    half = torch.finfo(torch.float16)
    assert cause.detail["smallest_normal"] == half.tiny
    ref = torch_grads(model, x, small_loss)
    flushed = [p.name for p in result.parameters if Flag.UNDERFLOW in p.flags]
    assert cause.detail["parameters"] == flushed and flushed
    outputs = _output_grads(model, x, small_loss)
    largest = max(float(g.abs().max()) for g in [*outputs.values(), *(ref[n] for n in flushed)])
    assert cause.detail["largest"] == pytest.approx(largest, rel=1e-6)
    assert cause.detail["scale_fits"] is (largest * cause.detail["scale"] < half.max)
    assert cause.detail["scaler_scale"] is None


def test_zeros_from_a_relu_whose_input_changed_sign_are_no_underflow():
    """fc1's biases put every pre-activation at +1e-4 in float32; float16's rounding of W·x + b
    (~1e-3) turns some negative, so the ReLU drops those units and their gradients are exactly 0
    in torch's float16 run, where float32's are far above float16's smallest normal: lost to
    another path, not to the range. compare flags the zeros and names no underflow."""
    torch.manual_seed(0)
    model, x = Tiny(), torch.randn(1, 8)
    with torch.no_grad():
        model.fc1.bias.copy_(-(x @ model.fc1.weight.T)[0] + 1e-4)
        with torch.autocast("cpu", dtype=torch.float16):
            half_pre = model.fc1(x)
    assert bool((half_pre <= 0).any()), "the premise: float16 flips some pre-activations' sign"
    ref, half = torch_grads(model, x, square), torch_grads(model, x, square, amp=torch.float16)
    lost = ref["fc1.weight"][(half["fc1.weight"] == 0) & (ref["fc1.weight"] != 0)].abs()
    assert lost.numel() and float(lost.min()) >= torch.finfo(torch.float16).tiny, "the premise: nothing below the range"
    result = gradcli.compare(model, x, loss=square, amp="float16")
    assert Flag.UNDERFLOW in next(p for p in result.parameters if p.name == "fc1.weight").flags  # the zeros, as counted
    assert not result.ok and "underflow" not in [c.kind for c in result.causes]
    assert "flushed" not in str(result)
    assert result.first_divergence.forward_differs and result.first_divergence.first_forward == "fc1 (Linear)"


def torch_scaler_steps(model, x, loss, limit=40):
    """torch's own GradScaler loop on a copy of the model (learning rate 0): each step's scale
    and whether the scaler skipped it, until a step is not skipped or `limit` steps; and the copy,
    holding the last step's unscaled gradients."""
    work = copy.deepcopy(model)
    scaler, opt = torch.amp.GradScaler("cpu"), torch.optim.SGD(work.parameters(), lr=0.0)
    steps = []
    for _ in range(limit):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            value = loss(work(x))
        scale = scaler.get_scale()
        scaler.scale(value).backward()
        scaler.unscale_(opt)
        skipped = sum(v.item() for v in scaler._found_inf_per_device(opt).values()) > 0
        scaler.step(opt)
        scaler.update()
        steps.append((scale, skipped))
        if not skipped:
            break
    return steps, work


def test_a_scaler_that_skips_every_step_gave_up_as_torchs_gradscaler_does():
    """1e-8·out underflows to 0 in float16 (not in float32), and sqrt(|0|)'s gradient is
    inf·0 = nan at every scale: torch's own GradScaler skips each of the 40 steps, halving
    the scale each time."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)), torch.randn(4, 8)

    def huge(out):
        return torch.sqrt((out * 1e-8).abs()).sum()

    steps, _ = torch_scaler_steps(model, x, huge)
    assert len(steps) == 40 and all(skipped for _, skipped in steps), "the premise: every step skipped"
    scales = [scale for scale, _ in steps]
    result = gradcli.compare(model, x, loss=huge, amp="float16", scaler=True)
    assert [(s.scale, s.skipped) for s in result.scaler_steps] == steps
    assert [c.as_dict() for c in result.causes if c.kind == "scaler-gave-up"] == [
        {"kind": "scaler-gave-up", "steps": 40, "scale": scales[-1]}]
    assert f"GradScaler skipped all 40 steps (scale down to {scales[-1]:g})" in result.notes
    assert not result.ok


def test_the_scaler_follows_gradscalers_own_steps_and_compares_at_the_settled_scale():
    torch.manual_seed(2)
    model, x = MLP(), torch.randn(16, 16)
    result = gradcli.compare(model, x, loss=square, amp="float16", scaler=True)
    steps, work = torch_scaler_steps(model, x, square)
    assert steps[0] == (65536.0, True), "the premise: the initial scale overflows a float16 loss's gradient"
    assert [(s.scale, s.skipped) for s in result.scaler_steps] == steps
    ref = torch_grads(model, x, square)
    for p in result.parameters:
        g, r = dict(work.named_parameters())[p.name].grad.double(), ref[p.name].double()
        assert math.isclose(p.rel_err, float(torch.linalg.vector_norm(g - r) / torch.linalg.vector_norm(r)), rel_tol=1e-6)
    assert "scale 65536 skipped" in str(result) and "scale 32768 used" in str(result)


def test_underflow_under_a_scaler_names_the_scale_gradscaler_settled_on():
    """1e-10·Σout²/n is too small for float16 even at GradScaler's scale: torch's own loop
    skips the first step (65536) and keeps the second, and the gradients are still lost."""
    torch.manual_seed(1)
    model, x = Tiny(), torch.randn(16, 8)

    def tinier(out):
        return 1e-10 * out.pow(2).mean()

    steps, work = torch_scaler_steps(model, x, tinier)
    assert not steps[-1][1], "the premise: GradScaler settles on a scale"
    ref = torch_grads(model, x, tinier)
    lost = [n for n, p in work.named_parameters() if bool(((p.grad == 0) & (ref[n] != 0)).any())]
    assert lost, "the premise: torch's scaled float16 run still loses gradients"
    result = gradcli.compare(model, x, loss=tinier, amp="float16", scaler=True)
    cause = next(c for c in result.causes if c.kind == "underflow")
    assert cause.detail["scaler_scale"] == steps[-1][0]
    assert set(lost) <= set(cause.detail["parameters"])


def test_a_bfloat16_gradient_that_cancels_is_within_the_mantissas_bound_over_its_sum():
    """Each input column sums to 0.02 over 4096 rows of size ~1, so the weight's gradient (the
    column sums) cancels: bfloat16's rounding of each term leaves it off by several times its
    own size, which torch's two runs show, yet within u·n, rounding in every one of n terms."""
    torch.manual_seed(0)
    n = 4096
    model, x = nn.Linear(8, 4, bias=False), torch.randn(n, 8)
    x = x - x.mean(0) + 0.02 / n

    def total(out):
        return out.sum()

    ref, cand = torch_grads(model, x, total), torch_grads(model, x, total, amp=torch.bfloat16)
    err = float(torch.linalg.vector_norm((cand["weight"] - ref["weight"]).double()) / torch.linalg.vector_norm(ref["weight"].double()))
    u = torch.finfo(torch.bfloat16).eps / 2
    assert 1 < err <= u * n, "the premise: far off, within the bound"
    result = gradcli.compare(model, x, loss=total, amp="bfloat16")
    assert not result.ok
    assert [c.as_dict() for c in result.causes] == [{
        "kind": "bfloat16-reduction", "unit_roundoff": u,
        "parameters": [{"name": "weight", "reduction": n, "rel_err": pytest.approx(err, rel=1e-6), "bound": u * n}]}]


class FrozenHead(nn.Module):
    """A first layer under a frozen head: the head passes a gradient on and has none of its own."""

    def __init__(self):
        super().__init__()
        self.fc1, self.head = nn.Linear(8, 4, bias=False), nn.Linear(4, 2)
        self.head.requires_grad_(False)

    def forward(self, x):
        return self.head(self.fc1(x))


def test_a_first_layer_whose_own_gradient_differs_is_where_the_difference_starts():
    """The cancelling batch above under a frozen head: the gradient the head passes back is the
    same for every row and agrees, the first layer's forward agrees, and its weight's gradient
    (the cancelling column sums) does not: the difference enters at the first layer, with its
    weight's error as the gradient's, at the line that calls it (torch's numbers, Python's line)."""
    import inspect

    torch.manual_seed(0)
    n = 4096
    model, x = FrozenHead(), torch.randn(n, 8)
    x = x - x.mean(0) + 0.02 / n

    def total(out):
        return out.sum()

    ref, cand = torch_grads(model, x, total), torch_grads(model, x, total, amp=torch.bfloat16)
    assert list(ref) == ["fc1.weight"], "the premise: the head has no gradient of its own"
    err = float(torch.linalg.vector_norm((cand["fc1.weight"] - ref["fc1.weight"]).double()) / torch.linalg.vector_norm(ref["fc1.weight"].double()))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        half = model.fc1(x).double()
    full = model.fc1(x).detach().double()
    forward_err = float(torch.linalg.vector_norm(half - full) / torch.linalg.vector_norm(full))
    assert err > 1 and forward_err < 16 * 2.0**-8, "the premise: the weight's gradient is far off, the forward is not"

    result = gradcli.compare(model, x, loss=total, amp="bfloat16")
    d = result.first_divergence
    assert (d.module, d.module_class, d.forward_differs, d.first_forward) == ("fc1", "Linear", False, None)
    assert d.grad_rel_err == pytest.approx(err, rel=1e-6) and d.forward_rel_err == pytest.approx(forward_err, rel=1e-3)
    lines, start = inspect.getsourcelines(FrozenHead.forward)
    (offset,) = [k for k, text in enumerate(lines) if "self.fc1(x)" in text]
    assert (d.file, d.line, d.code) == (inspect.getsourcefile(FrozenHead), start + offset, lines[offset].strip())


class NormalisedUnderFrozenHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.bn, self.head = nn.Linear(8, 16, bias=False), nn.BatchNorm1d(16, affine=False), nn.Linear(16, 2)
        self.head.requires_grad_(False)

    def forward(self, x):
        return self.head(self.bn(self.fc1(x)))


def _bn_grads(model: nn.Module, x: torch.Tensor, loss, amp=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradient at the BatchNorm's output and at its input, as torch's backward hook sees them."""
    work, seen = copy.deepcopy(model), {}
    work.bn.register_full_backward_hook(lambda module, grad_in, grad_out: seen.update(into=grad_out[0], out=grad_in[0]))
    with torch.autocast("cpu", dtype=amp) if amp else torch.autocast("cpu", enabled=False):
        value = loss(work(x))
    value.backward()
    return seen["into"].detach().double(), seen["out"].detach().double()


def test_a_batchnorm_that_amplifies_an_agreeing_gradient_is_the_cause():
    """Each row's loss weight is 1 ± 0.001, so the gradient entering the BatchNorm is nearly the
    same in every row; its backward subtracts the batch mean, which leaves the 0.001 part and
    float16's rounding of the whole (torch's hooks measure both sides): the error entering agrees,
    the error leaving is hundreds of times larger."""
    torch.manual_seed(0)
    model, x = NormalisedUnderFrozenHead(), torch.randn(8, 8)
    weights = 1 + 1e-3 * torch.randn(8, 2)

    def weighted(out):
        return (out * weights).sum()

    (into_ref, out_ref), (into_half, out_half) = _bn_grads(model, x, weighted), _bn_grads(model, x, weighted, torch.float16)
    before = float(torch.linalg.vector_norm(into_half - into_ref) / torch.linalg.vector_norm(into_ref))
    after = float(torch.linalg.vector_norm(out_half - out_ref) / torch.linalg.vector_norm(out_ref))
    assert 0 < before < 1e-3 and after > 100 * before, "the premise: BatchNorm's backward amplifies the error"
    result = gradcli.compare(model, x, loss=weighted, amp="float16")
    assert not result.ok
    assert (result.first_divergence.module, result.first_divergence.forward_differs) == ("bn", False)
    assert [c.as_dict() for c in result.causes] == [{
        "kind": "amplified", "module": "bn (BatchNorm1d)", "output_grad_rel_err": pytest.approx(before, rel=1e-6),
        "input_grad_rel_err": pytest.approx(after, rel=1e-6), "factor": pytest.approx(after / before, rel=1e-5)}]


def test_an_empty_parameter_has_no_difference():
    """A parameter with no elements: torch's gradient is empty on both sides, nothing differs."""

    class WithEmpty(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.empty = nn.Linear(8, 2), nn.Parameter(torch.zeros(0))

        def forward(self, x):
            return self.fc(x) + self.empty.sum()

    torch.manual_seed(0)
    model, x = WithEmpty(), torch.randn(4, 8)
    ref, cand = torch_grads(model, x, square), torch_grads(model, x, square, amp=torch.bfloat16)
    assert ref["empty"].numel() == 0 and torch.equal(ref["empty"], cand["empty"]), "the premise: torch's empty gradients"
    result = gradcli.compare(model, x, loss=square, amp="bfloat16")
    (empty,) = [p for p in result.parameters if p.name == "empty"]
    assert (empty.rel_err, empty.max_abs_err, empty.flags) == (0.0, 0.0, [Flag.AGREES])
    assert result.ok


def test_the_users_model_weights_grads_optimiser_and_batchnorm_stats_are_untouched():
    torch.manual_seed(3)
    model, x = CNN(), torch.randn(8, 3, 6, 6)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    square(model(x)).backward()
    opt.step()
    before = copy.deepcopy((model.state_dict(), [p.grad for p in model.parameters()], opt.state_dict()))
    result = gradcli.compare(model, x, loss=lambda out: 1e-6 * out.pow(2).mean(), amp="float16")
    assert not result.ok  # the reruns (watched, eval mode) ran too
    state, grads, opt_state = model.state_dict(), [p.grad for p in model.parameters()], opt.state_dict()
    assert all(torch.equal(state[k], before[0][k]) for k in state)
    assert all(torch.equal(g, h) for g, h in zip(grads, before[1]))
    assert all(torch.equal(opt_state["state"][k]["momentum_buffer"], before[2]["state"][k]["momentum_buffer"]) for k in opt_state["state"])
    assert model.training


def test_half_precision_weights_and_a_float64_reference():
    model, x = made("MLP")
    assert gradcli.compare(model, x, loss=square, dtype="bfloat16").ok
    result = gradcli.compare(model, x, loss=square, reference="float64")
    assert result.ok
    # the float32 candidate against float64: rounding, so not exactly zero
    assert 0 < max(p.rel_err for p in result.parameters) < 1e-5


def test_bad_options_are_usage_errors():
    model, x = made("MLP")
    for options, message in [({"scaler": True}, "--amp float16"), ({"amp": "float32"}, "--amp 'float32'"),
                             ({"amp": "bfloat16", "dtype": "float16"}, "not both"), ({"mode": "max-autotune"}, "--compile"),
                             ({"compile": True, "backend": "tvm"}, "--backend")]:
        with pytest.raises(UsageError, match=message):
            gradcli.compare(model, x, loss=square, **options)
    with pytest.raises(GradcliError, match="floating-point scalar"):
        gradcli.compare(model, x, amp="bfloat16")
    with pytest.raises(UsageError, match=r"every parameter of MLP is frozen \(requires_grad=False\)"):  # was a TypeError
        gradcli.compare(copy.deepcopy(model).requires_grad_(False), x, loss=square, amp="bfloat16")


def test_inductor_without_a_cpp_compiler_is_refused_with_the_reason(cli, monkeypatch):
    import gradcli.comparison.setup as setup

    monkeypatch.setattr(setup, "cpp_compiler", lambda: None)
    run = cli("compare", TARGET, "--var", "x=randn(4, 32)", "--loss", "out.sum()", "--compile")
    assert run.exit_code == 2
    assert "no C++ compiler" in run.stderr and "aot_eager" in run.stderr


def _example_mlp(seed: int) -> nn.Module:
    """examples/compare/models.py:MLP as `--seed` makes it: torch seeded, then the class called."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compare_models", ROOT / TARGET.split(":")[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return module.MLP()


def _input_grads(model: nn.Module, x: torch.Tensor, loss, amp=None) -> dict[str, torch.Tensor]:
    """Each child module's input gradient, as torch's backward hooks see it, on a copy."""
    work, seen = copy.deepcopy(model), {}
    handles = [m.register_full_backward_hook(lambda m, gi, go, name=name: seen.__setitem__(name, gi[0]))
               for name, m in work.named_children()]
    with torch.autocast("cpu", dtype=amp) if amp else torch.autocast("cpu", enabled=False):
        value = loss(work(x.clone().requires_grad_(True)))
    value.backward()
    for h in handles:
        h.remove()
    return seen


def test_the_command_agrees_differs_and_writes_its_json_and_plot(cli, tmp_path):
    model = _example_mlp(0)
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(5))
    args = ("compare", TARGET, "--var", f"x={x.tolist()}", "--seed", "0")
    # torch: bfloat16 autocast stays close to float32 in every parameter
    ref = torch_grads(model, x, square)
    bf16 = torch_grads(model, x, square, amp=torch.bfloat16)
    assert all(float(torch.linalg.vector_norm(bf16[n].double() - g.double()) / torch.linalg.vector_norm(g.double())) < 0.05
               for n, g in ref.items())
    ok = cli(*args, "--loss", "out.pow(2).mean()", "--amp", "bfloat16")
    assert ok.exit_code == 0, ok.stdout
    assert "candidate: autocast(bfloat16)" in ok.stdout and f"AGREES: all {len(ref)} parameters" in ok.stdout

    # torch: under float16 the scaled-down loss's gradient is flushed to zero; the first module in
    # backward order whose input gradient is lost is where the difference enters
    def tiny(out):
        return 1e-7 * out.pow(2).mean()

    ref_in, half_in = _input_grads(model, x, tiny), _input_grads(model, x, tiny, amp=torch.float16)
    errors = {name: float(torch.linalg.vector_norm(half_in[name].double() - g.double()) / torch.linalg.vector_norm(g.double()))
              for name, g in ref_in.items() if g is not None}
    order = [name for name, _ in model.named_children()]
    first = next(name for name in reversed(order) if errors.get(name, 0.0) > 0.5)
    ref, half = torch_grads(model, x, tiny), torch_grads(model, x, tiny, amp=torch.float16)
    lost = {n for n in ref if bool(((half[n] == 0) & (ref[n] != 0)).any())}
    assert lost, "the premise: torch's float16 run loses gradients"

    picture = tmp_path / "compare.png"
    bad = cli(*args, "--loss", "1e-7 * out.pow(2).mean()", "--amp", "float16", "--json", "--plot", str(picture))
    assert bad.exit_code == 1
    document = json.loads(bad.stdout)
    assert document["ok"] is False
    assert {"name", "rel_err", "max_abs_err", "tolerance", "flags"} <= set(document["parameters"][0])
    assert document["first_divergence"]["module"] == first
    assert [c["kind"] for c in document["causes"]] == ["underflow"]
    assert {p["name"] for p in document["parameters"] if Flag.UNDERFLOW.value in p["flags"]} == lost
    for p in document["parameters"]:  # the numbers against torch's two runs (docs/json.md's definitions)
        g, r = half[p["name"]].double(), ref[p["name"]].double()
        assert p["max_abs_err"] == pytest.approx(float((g - r).abs().max()), rel=1e-6, abs=1e-30)
        small = p["tolerance"] * float(r.abs().max())
        assert p["zero_share"] == pytest.approx(int(((g == 0) & (r.abs() > small)).sum()) / r.numel())
        assert p["nonfinite_share"] == 0.0 and bool(torch.isfinite(g).all())
    pytest.importorskip("matplotlib")
    assert picture.read_bytes()[:4] == b"\x89PNG"


def test_a_nan_loss_is_the_string_nan_in_the_json():
    """1e5·out² overflows float16 to inf under autocast, and inf - inf is nan: torch's
    candidate loss is nan where the float32 one is 0, while the gradients (the two sums'
    gradients cancel before the overflowing multiply) are exactly 0 on both sides."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)), torch.randn(4, 8)

    def cancelled(out):
        big = 1e5 * out.pow(2)
        return big.sum() - big.sum()

    with torch.autocast("cpu", dtype=torch.float16):
        candidate = cancelled(copy.deepcopy(model)(x))
    reference = cancelled(copy.deepcopy(model)(x))
    assert math.isnan(candidate.item()) and reference.item() == 0.0, "the premise: torch's two losses"
    ref, half = torch_grads(model, x, cancelled), torch_grads(model, x, cancelled, amp=torch.float16)
    assert all(torch.equal(half[n].float(), ref[n]) for n in ref)
    result = gradcli.compare(model, x, loss=cancelled, amp="float16")
    document = json.loads(result.to_json())
    assert document["loss"] == {"reference": 0.0, "candidate": "nan"}
    assert {p["name"]: (p["rel_err"], p["max_abs_err"]) for p in document["parameters"]} == {n: (0.0, 0.0) for n in ref}
    # the gradients agree, the losses do not: a candidate whose loss is nan is not ok
    assert all(p["flags"] == ["AGREES"] for p in document["parameters"])
    assert document["ok"] is False and not result.ok
    assert document["problems"] == ["loss: DIFFERS: the candidate's loss is nan where the reference's is 0"]
    assert document["first_divergence"] is None and document["causes"] == []
    assert str(result).rstrip().endswith(
        f"DIFFERS: the loss: candidate nan, reference 0, though all {len(ref)} parameters are within tolerance of the reference")


def test_an_overflowing_candidate_is_flagged_and_its_numbers_are_strings_in_the_json():
    """A loss scaled by 1e5 overflows float16: torch's own autocast run gives non-finite
    gradients; the JSON writes the non-finite numbers as strings ('inf', 'nan')."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)), torch.randn(4, 8)

    def huge(out):
        return 1e5 * out.pow(2).sum()

    ref, half = torch_grads(model, x, huge), torch_grads(model, x, huge, amp=torch.float16)
    result = gradcli.compare(model, x, loss=huge, amp="float16")
    assert not result.ok
    document = json.loads(result.to_json())
    for p in document["parameters"]:
        g, r = half[p["name"]].double(), ref[p["name"]].double()
        share = int((~torch.isfinite(g) & torch.isfinite(r)).sum()) / r.numel()
        assert share > 0, "the premise: torch's float16 run overflows"
        assert p["nonfinite_share"] == pytest.approx(share)
        assert Flag.OVERFLOW.value in p["flags"]
        assert not math.isfinite(float((g - r).abs().max()))  # torch: no finite largest difference
        assert p["max_abs_err"] in ("inf", "nan") and p["rel_err"] in ("inf", "nan")  # strings, not numbers


def test_a_forward_divergence_is_located_with_torchs_forward_error():
    """bfloat16 weights, BatchNorm over four nearly equal rows: the normalised differences are
    rounding, so the forward output already differs where the gradient does. torch's own two
    forwards give each module's output error; the first Linear's is below the smallest
    bfloat16 tolerance (16 unit roundoffs), so the first module whose output differs is after it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 4))
    x = torch.randn(1, 8) + 0.01 * torch.randn(4, 8)
    errors = {}
    ref, cand = copy.deepcopy(model), copy.deepcopy(model).to(torch.bfloat16)
    h_ref, h_cand = x, x.to(torch.bfloat16)
    for k, (a, b) in enumerate(zip(ref, cand)):
        with torch.no_grad():
            h_ref, h_cand = a(h_ref), b(h_cand)
        errors[str(k)] = float((h_cand.double() - h_ref.double()).norm() / h_ref.double().norm())
    assert errors["0"] < 16 * 2.0**-8, "the premise: the first layer's output agrees"
    result = gradcli.compare(model, x, loss=square, dtype="bfloat16")
    d = result.first_divergence
    assert d is not None and not result.ok
    assert d.forward_rel_err == pytest.approx(errors[d.module], rel=1e-6)
    assert d.forward_differs is (errors[d.module] > d.tolerance) and d.forward_differs
    assert d.first_forward in (f"{k} ({type(model[int(k)]).__name__})" for k in ("1", "2") if int(k) <= int(d.module))


def test_a_minus_inf_candidate_loss_is_the_string_minus_inf_in_the_json():
    """1e-8·Σout² underflows to 0 in float16 under autocast, and log(0) is -inf there, while
    float32's loss is finite (torch computes both)."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)), torch.randn(4, 8)

    def logged(out):
        return torch.log(out.pow(2).sum() * 1e-8)

    with torch.autocast("cpu", dtype=torch.float16):
        candidate = logged(copy.deepcopy(model)(x))
    reference = logged(copy.deepcopy(model)(x))
    assert candidate.item() == float("-inf") and math.isfinite(reference.item()), "the premise: torch's two losses"
    document = json.loads(gradcli.compare(model, x, loss=logged, amp="float16").to_json())
    assert document["loss"] == {"reference": pytest.approx(reference.item(), rel=1e-6), "candidate": "-inf"}
    assert document["ok"] is False
