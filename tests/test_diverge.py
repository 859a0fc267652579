"""`gradcli diverge`'s library: two runs of examples/diverge/train.py, judged step by step.

The truth comes from the same loop run here with plain torch (eager, compiled, float64), its
per-step losses and weights compared by hand against the band the float64 loop measures; each
diverge call is three child processes, so the runs are shared (scope="module") and few.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from gradcli.divergence.band import FACTOR, UNIT, Band, gap
from gradcli.divergence.run import diverge
from gradcli.divergence.setups import RunSetup, parse_setup
from gradcli.errors import UsageError
from gradcli.watcher.script import Script

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "diverge" / "train.py"
STEPS = 12
HOOK_AT = 5


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
def hooked():
    return diverge(Script(str(EXAMPLE), None, ("--steps", str(STEPS), "--hook-at", str(HOOK_AT))),
                   RunSetup("same"), parse_setup("compile:aot_eager"))


@pytest.fixture(scope="module")
def seeded():
    return diverge(Script(str(EXAMPLE), None, ()), RunSetup("same"), RunSetup("same"), steps=3)


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


def test_same_on_a_seeded_script_stays_within_the_band(seeded, truth):
    assert seeded.ok and seeded.first_step is None and seeded.parted is None and seeded.cause is None
    assert len(seeded.steps) == 3  # --steps
    assert [s.loss[0] for s in seeded.steps] == pytest.approx([loss for loss, _ in truth["eager"][:3]], rel=1e-6)
    assert all(s.batch_same and s.loss_ratio == 0 and s.grad_ratio == 0 and s.param_ratio == 0 for s in seeded.steps)


def test_the_results_follow_the_protocol(seeded, hooked):
    from test_outcome import follows_the_protocol

    follows_the_protocol(seeded, passes=True)
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
