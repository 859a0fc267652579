"""gradcli watch on the fault corpus of examples/watch/train.py.

Every expectation comes from the same loop run without gradcli: torch says at which step the
loss or a gradient first stops being finite, which parameters, what the weights were before
that step, and which backward node first sends on a nan or inf (torch's node hooks) in which
module (forward hooks). The line is the line of the example's source
that holds the operation (read from the file, not from gradcli).
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import gradcli
from gradcli.watcher import reading
from watch_truths import EXAMPLE, first_nonfinite_backward, load_example
from gradcli.watcher.options import WatchOptions
from gradcli.watcher.run import watch_script
from gradcli.watcher.script import Script

AT = 6
STEPS = 14


T = load_example("watch_train_example")


def line_of(text: str) -> int:
    """The line of the example that holds `text` (the truth of a reported line)."""
    lines = EXAMPLE.read_text().splitlines()
    found = [i + 1 for i, line in enumerate(lines) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def torch_truth(fault: str, model: str = "mlp", steps: int = STEPS, at: int = AT) -> dict:
    """The plain loop: the first step whose loss or gradient is not finite, its non-finite
    parameters, and the weights before each step was applied."""
    truth: dict = {"weights": {}, "losses": {}, "zero": {}, "none": {}, "grads": {}}

    def before(step, m, loss):
        truth["weights"][step] = {k: v.detach().clone() for k, v in m.state_dict().items()}
        truth["grads"][step] = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
        truth["losses"][step] = float(loss.detach())
        truth["none"][step] = [n for n, p in m.named_parameters() if p.grad is None]
        truth["zero"][step] = [n for n, p in m.named_parameters() if p.grad is not None and not bool(p.grad.any())]
        if "step" in truth:
            return
        bad = [n for n, p in m.named_parameters() if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
        if bad or not math.isfinite(float(loss.detach())):
            truth.update(step=step, params=bad)

    T.train(model, fault, steps, at, before_step=before)
    return truth


def watched(fault: str, model: str = "mlp", steps: int = STEPS, at: int = AT, **options):
    """The same loop under gradcli.watch() (no models named: found as the CLI finds them)."""
    seen: dict = {}

    def before(step, m, loss):
        seen["model"] = m

    result = None
    with gradcli.watch(**options) as w:
        try:
            T.train(model, fault, steps, at, before_step=before)
        except gradcli.WatchStop as stop:
            assert stop.result is w.result
        result = w.result
    return result, seen["model"]


def same_weights(model, weights) -> bool:
    return all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())


# -- stops found in process ------------------------------------------------------------------
def test_where_leak_stops_at_torchs_step_with_its_node_and_line():
    truth = torch_truth("where")
    result, model = watched("where")
    stop = result.stop
    assert stop.step == truth["step"] == AT
    assert stop.parameters == truth["params"]
    assert same_weights(model, truth["weights"][AT])  # step AT was not applied
    assert stop.origin.phase == "backward"
    assert stop.origin.node == first_bad_backward("where", truth)[0] == "LogBackward0"
    assert stop.origin.line == line_of("torch.where(x > 0, torch.log(x * self.scale)")
    assert stop.cause.kind == "leaked_branch"
    assert stop.replay.how == "replayed"


def test_custom_function_backward_is_blamed_with_its_backward_line():
    truth = torch_truth("custom")
    result, model = watched("custom")
    stop = result.stop
    assert stop.step == truth["step"] == AT and stop.parameters == truth["params"]
    assert same_weights(model, truth["weights"][AT])
    assert stop.origin.node == first_bad_backward("custom", truth)[0] == "RowNormalizeBackward"
    # torch: in backward, x and norm are saved finite; a zero row makes `x / norm` 0/0, the first nan
    lines, first = inspect.getsourcelines(T.RowNormalize.backward)
    assert bool(torch.isnan(torch.zeros(1, 4) / torch.zeros(1, 1)).all())
    assert stop.origin.line == line_of("y = x / norm") and first < stop.origin.line < first + len(lines)
    assert stop.origin.code == "y = x / norm" and stop.origin.module_class == "RowNormalize"
    assert stop.cause.kind == "custom_backward"


def first_bad_backward(fault, truth):
    """Torch's own answer at the stopped step (the plain loop's weights before it, the same
    batch): the first node, in the order backward runs them, whose outgoing gradient holds nan
    or inf (torch's node hooks), and the child module whose output it made."""
    model, _, _ = T.build("mlp", fault)
    model.load_state_dict(truth["weights"][truth["step"]])
    x, y = T.batch("mlp", fault, truth["step"], AT)
    if fault == "half":
        x = x.half()
    return first_nonfinite_backward(model.named_children(),
                                    lambda: T.loss_of("mlp", fault, model(x), y, truth["step"], AT))


def test_float16_overflow_names_the_linear_torch_sees_overflow():
    truth = torch_truth("half")
    node, module = first_bad_backward("half", truth)
    result, watched_model = watched("half")
    stop = result.stop
    assert stop.step == truth["step"] == AT and stop.parameters == truth["params"]
    assert same_weights(watched_model, truth["weights"][AT])
    assert (stop.origin.node, stop.origin.module) == (node, module) == ("AddmmBackward0", "head")
    assert stop.origin.line == line_of("return self.head(h)")
    assert stop.cause.kind == "float16_overflow"


def test_inf_in_the_batch_is_the_data():
    truth = torch_truth("inf_batch")
    x, _ = T.batch("mlp", "inf_batch", AT, AT)
    assert not bool(torch.isfinite(x).all())  # torch: the batch itself holds the inf
    result, model = watched("inf_batch")
    stop = result.stop
    assert stop.step == truth["step"] == AT
    assert same_weights(model, truth["weights"][AT])
    assert stop.origin.phase == "input" and stop.cause.kind == "nonfinite_input"
    assert stop.origin.line == line_of("out = model(x)")
    assert stop.replay.how == "inspected"  # found in the batch itself: no forward was run again


# -- stops in the loss: the script rerun -------------------------------------------------------
@pytest.mark.parametrize("fault, op, text, causes", [
    ("log0", "log", "torch.log(1 - p)", {"log_of_zero"}),
    ("sqrt0", "SqrtBackward0", "torch.sqrt(((out - y) ** 2)", {"infinite_derivative", "zero_times_inf"}),
    ("lr", "pow", "return ((out - y) ** 2).mean()", {"overflow"}),
])
def test_a_fault_in_the_loss_is_found_by_rerunning_the_script(tmp_path, fault, op, text, causes):
    truth = torch_truth(fault)
    script = Script(str(EXAMPLE), None, ("--fault", fault, "--at", str(AT), "--steps", str(STEPS)))
    result = watch_script(script, WatchOptions(save=tmp_path / "bundle"))
    stop = result.stop
    assert stop.step == truth["step"]
    assert stop.parameters == truth["params"]
    if fault == "sqrt0":
        assert first_bad_backward("sqrt0", truth) == (op, None)
    assert stop.origin.node == op and stop.origin.module is None  # in the loss, outside the model
    assert stop.origin.line == line_of(text)
    assert stop.cause.kind in causes
    assert stop.replay.how == "reran" and stop.replay.steps == truth["step"] - 1
    from gradcli.watcher.bundle import load_bundle

    bundle = load_bundle(tmp_path / "bundle")  # the script's own classes found again, as replay.py does
    assert bundle["step"] == truth["step"]
    weights = bundle["weights"]["MLP"]
    assert all(torch.equal(weights[k], v) for k, v in truth["weights"][truth["step"]].items())


def test_a_diverging_run_says_so():
    script = Script(str(EXAMPLE), None, ("--fault", "lr", "--steps", str(STEPS)))
    truth = torch_truth("lr")
    losses = [truth["losses"][s] for s in range(truth["step"] - 3, truth["step"])]
    assert all(2 * a < b for a, b in zip(losses, losses[1:]))  # torch: more than doubling
    result = watch_script(script, WatchOptions(replay=False))
    assert result.stop.step == truth["step"]
    assert any("diverged" in note for note in result.notes)


# -- findings -------------------------------------------------------------------------------------
def test_a_layer_killed_by_its_bias_is_dead_from_the_step_torch_says():
    truth = torch_truth("dead")
    first = min(s for s, names in truth["zero"].items() if "fc1.weight" in names)
    assert all("fc1.weight" in truth["zero"][s] for s in range(first, STEPS + 1))
    result, _ = watched("dead")
    assert result.stop is None
    dead = [f for f in result.findings if f.kind == "dead"]
    assert len(dead) == 1 and dead[0].step == first == AT
    assert set(dead[0].parameters) == set(truth["zero"][first]) and dead[0].module == "fc1"


def test_a_parameter_never_used_has_no_gradient_from_step_one():
    truth = torch_truth("unused")
    result, _ = watched("unused")
    found = [f for f in result.findings if f.kind == "no_gradient"]
    assert len(found) == 1 and found[0].step == 1
    assert found[0].parameters == truth["none"][1] == ["spare.weight", "spare.bias"]


def test_a_one_batch_label_spike_is_reported_at_its_step():
    truth = torch_truth("spike", steps=20, at=15)
    before = sorted(truth["losses"][s] for s in range(1, 15))
    assert truth["losses"][15] > 100 * before[len(before) // 2]  # torch: that batch's loss is off the scale
    result, _ = watched("spike", steps=20, at=15)
    spikes = {f.kind: f.step for f in result.findings}
    assert spikes.get("loss_spike") == 15 and result.stop is None
    assert [f.kind for f in result.findings if f.step != 15] == []


def test_stop_on_spike_stops_before_the_spiking_step():
    truth = torch_truth("spike", steps=20, at=15)
    result, model = watched("spike", steps=20, at=15, stop_on=("nonfinite", "spike"))
    assert result.stop.step == 15 and result.stop.kind == "spike"
    assert same_weights(model, truth["weights"][15])


# -- what a check costs ------------------------------------------------------------------------------
def test_one_host_read_per_checked_step():
    before = reading.HOST_READS[0]
    result, _ = watched("none", steps=10, health_every=0)
    assert result.checks == 10 and reading.HOST_READS[0] - before == 10
    before = reading.HOST_READS[0]
    result, _ = watched("none", steps=10, every=5, health_every=0)
    assert result.checks == 2 and reading.HOST_READS[0] - before == 2


def test_at_every_n_only_the_steps_to_be_checked_keep_their_calls_and_the_stop_is_still_replayed():
    """--every 3: the model calls of an unchecked step are not kept (nothing replays them); a
    checked step's are, so the stop at step AT (a multiple of 3) is replayed to torch's node."""
    truth = torch_truth("where")
    held: dict[int, int] = {}

    def before(step, m, loss):
        held[step] = len(gradcli.watcher.session.current().calls)

    with gradcli.watch(every=3) as w:
        with pytest.raises(gradcli.WatchStop):
            T.train("mlp", "where", STEPS, AT, before_step=before)
    # the first step's calls are kept too: before it no optimizer is known, nor its count
    assert {step: kept > 0 for step, kept in held.items()} == {step: step % 3 == 0 or step == 1
                                                                for step in range(1, AT + 1)}
    assert w.result.stop.step == truth["step"] == AT and w.result.stop.replay.how == "replayed"
    assert w.result.stop.origin.node == first_bad_backward("where", truth)[0]


def test_two_optimizers_are_both_watched_and_named():
    torch.manual_seed(0)
    gen, disc = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    opt_g, opt_d = torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters())
    with gradcli.watch() as w:
        for step in range(1, 6):
            z, real = torch.randn(8, 4), torch.randn(8, 4)
            opt_d.zero_grad()
            d_loss = disc(real).mean() - disc(gen(z).detach()).mean()
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = -disc(gen(z)).mean()
            if step == 4:
                g_loss = g_loss * float("inf")
            g_loss.backward()
            try:
                opt_g.step()
            except gradcli.WatchStop:
                break
    assert w.result.optimizers == ["Adam", "Adam#2"]
    assert w.result.stop.optimizer == "Adam#2" and w.result.stop.step == 4


def test_lbfgs_step_with_a_closure_is_checked():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.LBFGS(model.parameters(), max_iter=3)
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    calls = {"n": 0}

    def closure():
        calls["n"] += 1
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss

    with gradcli.watch(model, opt) as w:
        for _ in range(3):
            opt.step(closure)
    assert w.result.stop is None and w.result.steps == 3 and w.result.checks == calls["n"]
    weights = [p.detach().clone() for p in model.parameters()]
    bad_x = x.clone()
    bad_x[0, 0] = float("nan")

    def bad_closure():
        opt.zero_grad()
        loss = ((model(bad_x) - y) ** 2).mean()
        loss.backward()
        return loss

    with gradcli.watch(model, opt) as w, pytest.raises(gradcli.WatchStop):
        opt.step(bad_closure)
    assert w.result.stop.origin.phase == "input"
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))
    # at --every 2 the closure of the second step is the one checked: its calls replay the stop
    with gradcli.watch(model, opt, every=2) as w, pytest.raises(gradcli.WatchStop):
        opt.step(closure)
        opt.step(bad_closure)
    assert w.result.stop.step == 2 and w.result.stop.origin.phase == "input"


def test_the_hooks_are_gone_after_the_block():
    backward = torch.autograd.backward
    from torch.optim import lr_scheduler

    wrapped = [(torch.optim.Optimizer, "__init__"), (torch.optim.Optimizer, "zero_grad"), (torch.nn.Module, "zero_grad"),
               (torch.nn.Module, "train"), (lr_scheduler.LRScheduler, "__init__"), (torch.amp.GradScaler, "step"),
               (torch.amp.GradScaler, "scale"), *((module, clip) for module in (torch.nn.utils, torch.nn.utils.clip_grad)
                                                  for clip in ("clip_grad_norm_", "clip_grad_value_"))]
    own = [owner.__dict__[name] for owner, name in wrapped]
    modes = torch.overrides._get_current_function_mode_stack()
    with gradcli.watch():
        assert torch.autograd.backward is not backward
        assert all(owner.__dict__[name] is not o for (owner, name), o in zip(wrapped, own))
    assert torch.autograd.backward is backward
    assert all(owner.__dict__[name] is o for (owner, name), o in zip(wrapped, own))
    assert torch.overrides._get_current_function_mode_stack() == modes  # the first step's recorder is gone
    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer as optim_module

    assert not optim_module._global_optimizer_pre_hooks and not nn_module._global_forward_hooks


def test_the_saved_step_is_read_back_by_trace_and_grads(tmp_path):
    truth = torch_truth("where")
    folder = tmp_path / "bundle"
    script = Script(str(EXAMPLE), None, ("--fault", "where", "--at", str(AT), "--steps", str(STEPS)))
    assert watch_script(script, WatchOptions(save=folder)).stop.step == AT
    from gradcli.watcher.bundle import ReplayedStep

    step = ReplayedStep(folder / "replay.py")
    step().backward()
    for name, param in step.models["MLP"].named_parameters():  # the stopped step's own gradients
        torch.testing.assert_close(param.grad, truth["grads"][AT][name], equal_nan=True, rtol=0, atol=0)
    from typer.testing import CliRunner

    from gradcli.cli import app

    runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})
    grads = runner.invoke(app, ["grads", f"{folder / 'replay.py'}:step"])
    assert grads.exit_code == 1 and "models.MLP.scale: NONFINITE" in grads.stdout
    traced = runner.invoke(app, ["trace", f"{folder / 'replay.py'}:step", "--flow"])
    assert traced.exit_code == 1 and "the gradient of models.MLP.scale is not finite" in traced.stdout


class MaskedMean(torch.nn.Module):
    """A model that averages its token features over a mask, as a pooling layer does."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, mask):
        h = self.proj(x) * mask.unsqueeze(-1)
        return h.sum(dim=1) / mask.sum(dim=1, keepdim=True)


def test_a_mean_over_an_empty_mask_is_a_division_by_zero():
    torch.manual_seed(0)
    model = MaskedMean()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, mask = torch.randn(2, 3, 4), torch.ones(2, 3)
    empty = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.isnan(model(x, empty)).any()  # torch: 0/0 on the second row
    with gradcli.watch(model, opt) as w:
        for step in range(1, 4):
            opt.zero_grad()
            model(x, mask=empty if step == 3 else mask).pow(2).mean().backward()
            try:
                opt.step()
            except gradcli.WatchStop:
                break
    stop = w.result.stop
    assert stop.step == 3 and stop.origin.phase == "forward" and stop.origin.node == "div"
    assert stop.cause.kind == "division_by_zero" and stop.origin.module == ""


def test_a_validation_loop_under_no_grad_keeps_nothing_for_the_replay():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradcli.watch(model, opt) as w:
        opt.zero_grad()
        model(torch.randn(4, 3)).pow(2).mean().backward()
        with torch.no_grad():
            for _ in range(100):
                model(torch.randn(4, 3))
        assert len(w.calls) == 1  # the training call only
        opt.step()
    assert w.result.checks == 1 and w.result.ok


def test_a_steps_calls_are_freed_when_it_is_applied_without_the_cyclic_collector():
    import gc
    import weakref

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    enabled = gc.isenabled()
    gc.disable()  # as the console script runs: only reference counting frees
    try:
        with gradcli.watch(model, opt) as w:
            opt.zero_grad()
            model(torch.randn(4, 3)).pow(2).mean().backward()
            first = weakref.ref(w.calls[0])
            assert first().grads[0] is not None  # the gradient that arrived at the output, kept
            opt.step()
            assert first() is None  # no cycle through the output's hook keeps it alive
    finally:
        if enabled:
            gc.enable()


def test_a_watch_leaves_no_process_wide_hook_behind():
    """torch's own registries of process-wide module hooks are as before a watch (a leftover
    makes every later torch.compile warn of global hooks)."""
    from torch.nn.modules import module as nn_module

    registries = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks_with_kwargs",
                  "_global_forward_hooks_always_called", "_global_backward_hooks")
    before = {name: dict(getattr(nn_module, name)) for name in registries}
    watched("none", steps=3)
    assert {name: dict(getattr(nn_module, name)) for name in registries} == before


def test_the_norms_a_check_reads_are_torchs():
    """reading._norms: BLAS's dot for dense float32/float64 CPU gradients, large or small (their
    sum for the L1 norm of Adam's second moments, which are >= 0), _foreach_norm for the rest
    (float16, strided): each norm as torch computes it in float64, all-dense lists (the usual
    case) and mixed ones alike, and nan or inf kept."""
    g = torch.Generator().manual_seed(0)
    big = torch.randn(1 << 17, generator=g)
    tensors = [big, torch.randn(3, 5, generator=g), torch.randn(1 << 17, generator=g).half(),
               torch.randn(512, 512, generator=g).t(), torch.randn(1 << 16, generator=g, dtype=torch.float64)]
    dense = [t for t in tensors if t.dtype != torch.half and t.is_contiguous()]
    assert reading._norms(dense).tolist() == pytest.approx([float(torch.linalg.vector_norm(t.double())) for t in dense],
                                                           rel=1e-5)
    norms = reading._norms(tensors).tolist()
    for t, n in zip(tensors, norms):
        exact = float(torch.linalg.vector_norm(t.double()))  # float16's own norm is a float16: 3 digits
        assert n == pytest.approx(exact, rel=1e-3 if t.dtype == torch.half else 1e-5)
    for bad in (float("nan"), float("inf")):
        broken = big.clone()
        broken[7] = bad
        for order in (2, 1):
            (n,) = reading._norms([broken.abs() if order == 1 else broken], order).tolist()
            assert math.isnan(n) if bad != bad else n == float("inf")
    moments = [t.abs() for t in tensors]
    sums = reading._norms(moments, order=1).tolist()
    for t, n in zip(moments, sums):
        exact = float(torch.linalg.vector_norm(t.double(), 1))
        assert n == pytest.approx(exact, rel=1e-3 if t.dtype == torch.half else 1e-5)


def test_the_layer_spikes_of_one_step_are_one_entry_of_the_report():
    """The text report: layer spikes at the same step of the same optimizer are one entry, the
    layers largest first (by value over median), with the largest's numbers; another step's
    spike and another kind stay entries of their own."""
    from gradcli.render.training.watch import watch_lines
    from gradcli.watcher.result import WatchFinding, WatchResult

    def spike(step, layer, value, median):
        return WatchFinding(step, "layer_spike", "SGD", [f"{layer}.weight"], layer,
                            {"layer": layer, "value": value, "median": median, "z": 20.0})

    result = WatchResult(steps=30, checks=30, finished=True, findings=[
        spike(12, "conv1", 4.0, 1.0), spike(12, "fc", 90.0, 3.0), spike(12, "bn1", 2.0, 0.5), spike(20, "fc", 8.0, 2.0),
        WatchFinding(12, "adam_ratio", "SGD", ["fc.weight"], "fc", {"layer": "fc", "ratio": 40.0})])
    text = "\n".join(watch_lines(result))
    assert "step 12  layer gradient-norm spike (SGD) in 3 layers: fc, conv1, bn1" in text
    assert "the largest, fc: 90 vs median 3 (z 20.0)" in text
    assert text.count("layer gradient-norm spike") == 2 and "step 20  layer gradient-norm spike (SGD): fc.weight" in text
    assert "step 12  g² far above Adam's v (SGD): fc.weight" in text
