"""`gradcli diverge`'s library: two runs of examples/diverge/train.py, judged step by step.

The truth comes from the same loop run here with plain torch (eager, compiled, float64), its
per-step losses and weights compared by hand against the band the float64 loop measures; each
diverge call is three child processes, so the runs are shared (scope="module") and few, and the
two the docs' examples run too are those runs' results (tests/shared_runs.py, `shared_result`).
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from gradcli.divergence.band import FACTOR, UNIT, Band, gap
from gradcli.divergence.run import diverge
from gradcli.divergence.setups import RunSetup, parse_setup
from gradcli.errors import UsageError
from gradcli.watcher.script import Script
from paths import ROOT
from shared_runs import RUNS, shared_result

EXAMPLE = ROOT / "examples" / "diverge" / "train.py"
STEPS = 8
HOOK_AT = 5
FLOAT64_STEPS = 2
#: The float16 run's RMSNorm overflows at step 4 (found by hand below): the runs stop there.
OVERFLOW_STEPS = 4


def _example():
    spec = importlib.util.spec_from_file_location("diverge_train_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trajectory(*, compiled: bool = False, float64: bool = False, hook_at: int | None = None, steps: int = STEPS):
    """The script's loop by hand: each step's loss and the weights after it."""
    torch.manual_seed(0)
    model = _example().MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if float64:
        model.double()
    if compiled:
        torch._dynamo.reset()
        model.compile(backend="aot_eager")
    data = torch.Generator().manual_seed(1)
    out = []
    for step in range(1, steps + 1):
        if step == hook_at:
            model.act.register_forward_hook(lambda module, args, o: o * 0.5)
        x = torch.randn(32, 8, generator=data)
        y = torch.sin(x.sum(dim=1, keepdim=True))
        if float64:
            x = x.double()
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        out.append((float(loss.detach()), [p.detach().double().clone() for p in model.parameters()]))
    return out


def first_past_band(a, b, x32, x64) -> int | None:
    """By hand: the first step whose loss or any weight is further apart than 16 x (the
    float32 loop's drift from float64 + float32's unit roundoff x the value)."""
    u = UNIT["float32"]
    for k, ((la, pa), (lb, pb), (l32, p32), (l64, p64)) in enumerate(zip(a, b, x32, x64), start=1):
        if abs(la - lb) > FACTOR * (abs(l32 - l64) + u * abs(l64)):
            return k
        for wa, wb, w32, w64 in zip(pa, pb, p32, p64):
            if float((wa - wb).abs().max()) > FACTOR * (float((w32 - w64).abs().max()) + u * float(w64.abs().max())):
                return k
    return None


@pytest.fixture(scope="module")
def truth():
    return {"eager": trajectory(), "float64": trajectory(float64=True),
            "hooked_eager": trajectory(hook_at=HOOK_AT), "hooked_compiled": trajectory(compiled=True, hook_at=HOOK_AT)}


@pytest.fixture(scope="module")
def hooked(tmp_path_factory):
    """`gradcli diverge --b compile:aot_eager examples/diverge/train.py --steps 8 --hook-at 5`'s
    result, the run the docs' example and test_json_docs.py read too (tests/shared_runs.py)."""
    assert RUNS["diverge-hook-after-compile"][-4:] == ["--steps", str(STEPS), "--hook-at", str(HOOK_AT)]
    return shared_result("diverge-hook-after-compile", tmp_path_factory)


@pytest.fixture(scope="module")
def float64(tmp_path_factory):
    """`gradcli diverge --b float64 examples/diverge/train.py --steps 2`'s result (diverge
    --help's example, shared the same way)."""
    assert RUNS["diverge-float64"][-2:] == ["--steps", str(FLOAT64_STEPS)]
    return shared_result("diverge-float64", tmp_path_factory)


@pytest.fixture(scope="module")
def overflow():
    return diverge(Script(str(EXAMPLE), None, ("--norm",)), RunSetup("same"), parse_setup("autocast:float16"), steps=OVERFLOW_STEPS)


def test_eager_and_aot_eager_stay_within_the_band_until_the_hook(hooked, truth):
    before = HOOK_AT - 1
    assert first_past_band(truth["eager"][:before], truth["hooked_compiled"][:before], truth["eager"], truth["float64"]) is None
    assert all(s.phase is None for s in hooked.steps[:before])
    assert all(s.loss_ratio <= 1 and s.grad_ratio <= 1 and s.param_ratio <= 1 for s in hooked.steps[:before])
    # the losses the runs recorded are the loop's own, step by step
    assert [s.loss[0] for s in hooked.steps] == pytest.approx([loss for loss, _ in truth["hooked_eager"]], rel=1e-6)
    assert [s.loss[1] for s in hooked.steps] == pytest.approx([loss for loss, _ in truth["hooked_compiled"]], rel=1e-6)


def test_a_hook_registered_after_compiling_parts_at_its_step_in_forward_at_its_module(hooked, truth):
    expected = first_past_band(truth["hooked_eager"], truth["hooked_compiled"], truth["eager"], truth["float64"])
    assert expected == HOOK_AT  # the compiled loop never runs the hook
    assert not hooked.ok
    assert hooked.first_step == expected
    assert hooked.parted == "forward"  # the weights before the step agreed, the loss did not
    assert hooked.where is not None and hooked.where.module == "act" and hooked.where.module_class == "Tanh"
    assert hooked.where.file == str(EXAMPLE) and "register_forward_hook" in (hooked.where.code or "")
    assert hooked.cause is not None and hooked.cause.kind == "hook-after-compile"
    assert hooked.cause.detail["registered_at"] == HOOK_AT
    assert all(s.phase is None for s in hooked.steps[: HOOK_AT - 1])
    document = hooked.as_dict()
    assert (document["first_step"], document["parted"], document["module"]) == (HOOK_AT, "forward", "act")
    assert document["line"]["line"] == hooked.where.line and document["cause"]["kind"] == "hook-after-compile"
    assert len(document["series"]) == STEPS


def test_float32_against_float64_stays_within_the_band(float64, truth):
    assert float64.ok and float64.first_step is None and float64.parted is None and float64.cause is None
    assert len(float64.steps) == FLOAT64_STEPS  # --steps
    assert [s.loss[0] for s in float64.steps] == pytest.approx([loss for loss, _ in truth["eager"][:FLOAT64_STEPS]],
                                                              rel=1e-6)
    assert [s.loss[1] for s in float64.steps] == pytest.approx([loss for loss, _ in truth["float64"][:FLOAT64_STEPS]],
                                                              rel=1e-12)
    assert any("measured by this pair itself" in note for note in float64.notes)


def first_float16_overflow(steps: int) -> int | None:
    """By hand: the loop under CPU autocast in float16 with GradScaler (from diverge's scale), and
    the first step whose hand-written RMSNorm squares an activation past float16's largest."""
    from gradcli.divergence.recorder import INIT_SCALE

    example = _example()
    torch.manual_seed(0)
    model = example.MLP(0.0, norm=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE)
    overflowed: list[bool] = []
    model.norm.register_forward_pre_hook(lambda m, args: overflowed.append(bool(torch.isinf(args[0] * args[0]).any())))
    data = torch.Generator().manual_seed(1)
    for step in range(1, steps + 1):
        x = torch.randn(32, 8, generator=data)
        y = torch.sin(x.sum(dim=1, keepdim=True))
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x * example.GROWTH * step)
        if overflowed[-1]:
            return step
        loss = torch.nn.functional.mse_loss(out, y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return None


def test_a_float16_rmsnorm_that_squares_past_65504_parts_in_forward_at_the_norm(overflow):
    expected = first_float16_overflow(OVERFLOW_STEPS)
    assert expected is not None and expected > 1
    assert not overflow.ok
    assert (overflow.first_step, overflow.parted) == (expected, "forward")
    assert all(s.phase is None for s in overflow.steps[: expected - 1])  # float16's rounding before it: in band
    assert overflow.where is not None and (overflow.where.module, overflow.where.module_class) == ("norm", "RMSNorm")
    assert overflow.node == "mul" and "(x * x)" in (overflow.where.code or "")
    assert overflow.cause is not None and overflow.cause.kind == "overflow"
    assert (overflow.cause.detail["run"], overflow.cause.detail["dtype"]) == ("b", "float16")


def test_the_results_follow_the_protocol(float64, hooked):
    from outcome_protocol import follows_the_protocol

    follows_the_protocol(float64, passes=True)
    follows_the_protocol(hooked, passes=False)


def test_the_band_scales_the_measured_drift_to_the_pairs_precision():
    drift = [1.0, 1.0 + 2**-20]
    float32, bfloat16 = Band("float32"), Band("bfloat16")
    assert float32.of([drift[1]], [drift[0]]) == pytest.approx(FACTOR * (2**-20 + 2**-24))
    assert bfloat16.of([drift[1]], [drift[0]]) == pytest.approx(FACTOR * (2**16 * 2**-20 + 2**-8))
    assert gap([1.0, 2.0], [1.0, math.inf]) == math.inf and gap([math.nan], [math.nan]) == 0.0


@pytest.mark.parametrize(("text", "message"), [
    ("compile:tvm", "the backend 'tvm' is not one of"),
    ("autocast", "autocast takes a dtype"),
    ("float64:x", "float64 takes no argument"),
    ("fp8", "is not a setup"),
])
def test_a_bad_setup_is_refused_by_name(text, message):
    with pytest.raises(UsageError, match=message):
        parse_setup(text)


@pytest.mark.slow
@pytest.mark.parametrize("b", ["compile:aot_eager", "float64", "same"])
def test_healthy_pairs_stay_within_the_band_for_200_steps(b):
    long = 200
    result = diverge(Script(str(EXAMPLE), None, ("--steps", str(long))), RunSetup("same"), parse_setup(b))
    assert len(result.steps) == long
    assert result.ok, [s.as_dict() for s in result.steps if s.phase][:1]


def test_the_plot_draws_the_gap_over_the_steps(hooked, tmp_path):
    pytest.importorskip("matplotlib")
    from gradcli.plot.diverge import diverge_figure, draw_diverge

    figure = diverge_figure(hooked)
    losses, bands = figure.axes
    assert [list(line.get_ydata()) for line in losses.lines[:2]] == [[s.loss[0] for s in hooked.steps],
                                                                       [s.loss[1] for s in hooked.steps]]
    assert {line.get_label() for line in bands.lines} >= {"fc1.weight", "fc2.bias", "the band"}
    assert draw_diverge(hooked, tmp_path / "gap.png").stat().st_size > 0


@pytest.mark.slow
def test_dropout_under_inductor_parts_at_step_1_as_random_ops():
    from gradcli.comparison.setup import cpp_compiler

    if cpp_compiler() is None:
        pytest.skip("inductor needs a C++ compiler")
    example = _example()
    losses = []
    for compiled in (False, True):  # by hand: the same seed, eager's masks and inductor's own
        torch.manual_seed(0)
        model = example.MLP(0.2)
        if compiled:
            torch._dynamo.reset()
            model.compile(backend="inductor")
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
        losses.append(float(torch.nn.functional.mse_loss(model(x), torch.sin(x.sum(dim=1, keepdim=True)))))
    assert abs(losses[0] - losses[1]) > 1e-4 * abs(losses[0])
    result = diverge(Script(str(EXAMPLE), None, ("--dropout", "0.2")), RunSetup("same"), parse_setup("compile:inductor"),
                     steps=2)
    assert (result.first_step, result.parted) == (1, "forward")
    assert result.where is not None and result.where.module == "drop"
    assert result.cause is not None and result.cause.kind == "random-ops" and result.cause.detail["modules"] == ["drop"]
