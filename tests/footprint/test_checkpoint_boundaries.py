"""`memory`'s checkpoint advice (footprint/checkpoint.py) at the cases that decide it.

The bytes are torch's: a saved_tensors_hooks counter (every saved storage once, while a graph
holds it) around the plain run and around the run with torch.utils.checkpoint applied to the
module by hand. The forward times are the machine's, so they are fixed by the test (as in
test_memory.py's ranking test): the advice leaves out a module whose forward is more than 80%
of the model's, and one nested in a module already chosen, where nested means a path below it
("b1.0" under "b1"), not a name that starts alike ("b10" beside "b1"). A storage is freed only
when every node that saved it ran inside the module: one saved outside too stays alive.
"""

from __future__ import annotations

import math
import weakref

import pytest
import torch
from torch import nn

import gradcli
from memory_truth import allocator_peak, own_storages, saved_bytes  # torch's bytes and peak


def square(out):
    return out.pow(2).mean()


class _Box:
    def __init__(self, value):
        self.value = value


class Counter:
    """Every saved storage once, by address, counted while some graph still holds it."""

    def __init__(self):
        self.sizes, self.boxes = [], []

    def pack(self, tensor):
        box = _Box(tensor.detach())
        self.sizes.append((tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes()))
        self.boxes.append(weakref.ref(box))
        return box

    def unpack(self, box):
        return box.value

    def total(self, leave_out):
        alive = {ptr: size for (ptr, size), ref in zip(self.sizes, self.boxes) if ref() is not None}
        return sum(size for ptr, size in alive.items() if ptr not in leave_out)


def torch_drop(model, x, path):
    """The saved bytes torch's own checkpoint of `path` frees."""
    own = {t.untyped_storage().data_ptr() for t in (*model.parameters(), x)}
    counter = Counter()
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        plain = square(model(x))
    before = counter.total(own)
    module = model.get_submodule(path)
    module.forward = lambda *a, f=module.forward: torch.utils.checkpoint.checkpoint(f, *a, use_reentrant=False)
    try:
        counter = Counter()
        with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
            tried = square(model(x))
        return before - counter.total(own)
    finally:
        del module.forward, plain, tried


class Twins(nn.Module):
    """Two blocks whose names start alike (b10 is not inside b1), a block inside b1 that frees
    bytes of its own (b1.0), a block whose input nobody saved (b10 starts with a Tanh, which
    saves its output: a checkpoint must keep b10's input, torch's bytes count it), and a head
    that frees nothing (a Linear saves its input, which a checkpoint keeps anyway)."""

    def __init__(self):
        super().__init__()
        self.b1 = nn.Sequential(nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32)), nn.Tanh(), nn.Linear(32, 8))
        self.b10 = nn.Sequential(nn.Tanh(), nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 8))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.b10(self.b1(x)))


PATHS = ("b1", "b1.0", "b10", "head")


def _fixed_seconds(monkeypatch, model, seconds):
    from gradcli.footprint import checkpoint as advice

    every = {path: 1.0 for path, _ in model.named_modules()}  # the rest: slow, ranked last
    every.update(seconds)
    monkeypatch.setattr(advice, "forward_seconds", lambda run: (dict(every), every[""]))
    # the timed runs repeat until 0.3 s of CPU: timings only, never the advice's input
    monkeypatch.setattr(advice, "timed_pair", lambda run, params, applied, repeats: (1.0, 1.0))


@pytest.fixture
def twins():
    torch.manual_seed(0)
    model, x = Twins(), torch.randn(16, 8)
    drops = {path: torch_drop(model, x, path) for path in PATHS}
    assert drops["b1"] > 0 and drops["b1.0"] > 0 and drops["b10"] > 0 and drops["head"] == 0
    return model, x, drops


def _advised(model, x, drops, count):
    result = gradcli.memory(model, x, loss=square, checkpoint=count, create_graph=False, repeats=1)
    trials = [trial for trial in result.checkpoint if trial.segments is None]  # not a stack's segments
    for trial in trials:  # each prediction is torch's drop, and so is the rerun's
        assert trial.predicted_freed == drops[trial.module] == trial.saved_bytes_before - trial.saved_bytes_after
    return [trial.module for trial in trials]


@pytest.mark.parametrize("b1_seconds", [8.0, math.nextafter(8.0, math.inf)])
def test_a_module_is_advised_up_to_and_at_80_percent_of_the_forward(monkeypatch, twins, b1_seconds):
    """b1 takes 8 s of a 10 s forward (0.8 * 10.0 is 8.0 in floats), or one float more."""
    _fixed_seconds(monkeypatch, twins[0], {"": 10.0, "b1": b1_seconds, "b10": 0.001, "b1.0": 9.0})
    advised = _advised(*twins, count=2)
    assert ("b1" in advised) is (b1_seconds <= 0.8 * 10.0)
    assert "b10" in advised


def test_a_module_inside_a_chosen_one_is_not_chosen_and_a_name_starting_alike_is_not_inside(monkeypatch, twins):
    _fixed_seconds(monkeypatch, twins[0], {"": 10.0, "b1": 1e-6, "b1.0": 1e-5, "b10": 1e-3, "head": 1e-3})
    assert _advised(*twins, count=2) == ["b1", "b10"]


def test_a_module_around_a_chosen_one_is_not_chosen(monkeypatch, twins):
    _fixed_seconds(monkeypatch, twins[0], {"": 10.0, "b1.0": 1e-6, "b1": 1e-5, "b10": 1e-3, "head": 1e-3})
    assert _advised(*twins, count=2) == ["b1.0", "b10"]


def test_the_advice_stops_at_the_count_and_never_advises_a_module_that_frees_nothing(monkeypatch, twins):
    _fixed_seconds(monkeypatch, twins[0], {"": 10.0, "b1": 1e-6, "b1.0": 1e-5, "b10": 1e-3, "head": 1e-9})
    assert _advised(*twins, count=1) == ["b1"]
    assert _advised(*twins, count=3) == ["b1", "b10"]  # head frees 0 bytes, b1.0 is inside b1


class SharedOutput(nn.Module):
    """inner's last Tanh output is saved by the Tanh (inside) and by the square outside: a
    checkpoint of inner cannot free it; the first Tanh's output is saved inside only."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh())
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = self.inner(x)
        return self.head(h * h)


def test_a_storage_saved_inside_and_outside_the_module_is_not_freed(monkeypatch):
    torch.manual_seed(0)
    model, x = SharedOutput(), torch.randn(16, 8)
    drop = torch_drop(model, x, "inner")
    assert drop == 16 * 32 * 4  # the first Tanh's output only: torch kept the shared one
    _fixed_seconds(monkeypatch, model, {"": 10.0, "inner": 0.001, "head": 5.0})
    result = gradcli.memory(model, x, loss=square, checkpoint=1, create_graph=False, repeats=1)
    (trial,) = [trial for trial in result.checkpoint if trial.segments is None]  # not the stack's segments
    assert trial.module == "inner"
    assert trial.predicted_freed == drop == trial.saved_bytes_before - trial.saved_bytes_after


class Ticking(nn.Module):
    """Moves the test's clock on by its own cost each time it runs (nothing else moves it)."""

    def __init__(self, clock, cost):
        super().__init__()
        self.clock, self.cost = clock, cost

    def forward(self, x):
        self.clock[0] += self.cost
        return torch.tanh(x)


class Ticks(nn.Module):
    def __init__(self, clock):
        super().__init__()
        self.seq = nn.Sequential(Ticking(clock, 1.0), Ticking(clock, 2.0))
        self.twice = Ticking(clock, 4.0)

    def forward(self, x):
        return self.twice(self.twice(self.seq(x)))


def test_each_module_s_forward_time_is_the_clock_it_spent_summed_over_its_calls(monkeypatch):
    """The forward times the advice ranks by, on a clock only the modules move: a module's
    time is what ran inside it, over every call, and the whole forward's is everything."""
    import time

    from gradcli.footprint.checkpoint import forward_seconds
    from gradcli.footprint.replay import Run

    clock = [0.0]
    model = Ticks(clock)
    monkeypatch.setattr(time, "process_time", lambda: clock[0])
    spent, whole = forward_seconds(Run(model, (torch.randn(2, 3),), {}, square, None, torch.device("cpu")))
    assert spent == {"": 11.0, "seq": 3.0, "seq.0": 1.0, "seq.1": 2.0, "twice": 8.0}
    assert whole == 11.0


def test_each_module_trial_carries_torch_s_figures_and_the_stack_comes_first(monkeypatch, twins):
    """Beyond the bytes: a trial's forward seconds (fixed by the test), its timed runs (which
    must run the module checkpointed: the test counts what they save), its gradients against
    torch's own checkpoint of the module, and its peaks against torch's allocator events."""
    from gradcli.footprint import checkpoint as advice

    model, x, drops = twins
    fixed = {"": 10.0, "b1": 1e-6, "b1.0": 1e-5, "b10": 1e-3, "head": 1e-3}
    _fixed_seconds(monkeypatch, model, fixed)
    own, params = own_storages(model, x), list(model.parameters())
    timed = []

    def timed_pair(run, params, applied, repeats):
        with applied():
            timed.append(saved_bytes(lambda: square(model(x)), own))
        return 1.0, 2.0

    monkeypatch.setattr(advice, "timed_pair", timed_pair)
    result = gradcli.memory(model, x, loss=square, checkpoint=2, create_graph=False, repeats=1)
    assert result.checkpoint[0].segments is not None  # b10's four layers, in segments, first
    trials = [trial for trial in result.checkpoint if trial.segments is None]
    assert [trial.module for trial in trials] == ["b1", "b10"]
    plain_peak = allocator_peak(lambda: square(model(x)), params)
    plain = torch.autograd.grad(square(model(x)), params)
    for trial, bytes_timed in zip(trials, timed[:len(trials)]):
        module = model.get_submodule(trial.module)
        assert trial.module_class == type(module).__name__ and trial.forward_seconds == fixed[trial.module]
        assert (trial.seconds_before, trial.seconds_after) == (1.0, 2.0)
        assert bytes_timed == trial.saved_bytes_after == saved_bytes(lambda: square(model(x)), own) - drops[trial.module]
        module.forward = lambda *a, f=module.forward: torch.utils.checkpoint.checkpoint(f, *a, use_reentrant=False)
        try:
            tried = torch.autograd.grad(square(model(x)), params)
            peak = allocator_peak(lambda: square(model(x)), params)
        finally:
            del module.forward
        assert all(torch.equal(a, b) for a, b in zip(plain, tried))
        assert (trial.gradients_equal, trial.max_abs_diff, trial.agrees) == (True, 0.0, True)
        assert trial.peak_after - trial.peak_before == peak - plain_peak


def _ticking_run(monkeypatch, model):
    """A Run of `model` on the test's clock, and the list its forward calls are counted in."""
    import time

    from gradcli.footprint.replay import Run

    monkeypatch.setattr(time, "process_time", lambda: model.clock[0])
    calls = []
    model.register_forward_pre_hook(lambda *args: calls.append(1))
    return Run(model, (torch.randn(2, 3),), {}, square, None, torch.device("cpu")), calls


def _clock_moved(model, run):
    begun = model.clock[0]
    torch.autograd.grad(run(), list(model.parameters()))
    return model.clock[0] - begun


class TicksWithWeights(Ticks):
    def __init__(self, clock):
        super().__init__(clock)
        self.clock, self.fc = clock, nn.Linear(3, 3)

    def forward(self, x):
        return super().forward(self.fc(x))


def test_the_timed_runs_are_forward_and_backward_on_the_clock_with_torch_s_recomputation(monkeypatch):
    """Each timed run is one forward + backward on the clock; checkpointing seq makes torch run
    it again in backward (the test's clock moves by it in torch's own checkpoint). At least
    `repeats` pairs: three here, as each pair runs for more than 0.3 s."""
    from gradcli.footprint.checkpoint import checkpointed, timed_pair

    model = TicksWithWeights([0.0])
    run, calls = _ticking_run(monkeypatch, model)
    x = run.args[0]
    plain = _clock_moved(model, lambda: square(model(x)))
    seq = model.seq.forward
    model.seq.forward = lambda *a: torch.utils.checkpoint.checkpoint(seq, *a, use_reentrant=False)
    tried = _clock_moved(model, lambda: square(model(x)))
    del model.seq.forward
    assert (plain, tried) == (11.0, 14.0)  # seq's 1 + 2 again
    calls.clear()
    assert timed_pair(run, list(model.parameters()), lambda: checkpointed(model.seq), 3) == (plain, tried)
    assert len(calls) == 2 * 3


@pytest.mark.parametrize(("cost", "pairs"), [(0.15, 1), (2.0 ** -10, 15)])
def test_the_timed_pairs_repeat_until_both_sides_ran_0_3_seconds_and_at_most_15_times(monkeypatch, cost, pairs):
    """0.15 + 0.15 is 0.3 to the last bit: one pair is enough; 2**-10 (exact on the clock) never reaches it."""
    import contextlib

    from gradcli.footprint.checkpoint import timed_pair

    model = TicksWithWeights([0.0])
    for module in (model.seq[0], model.seq[1], model.twice):
        module.cost = 0.0
    model.seq[0].cost = cost
    run, calls = _ticking_run(monkeypatch, model)
    assert timed_pair(run, list(model.parameters()), contextlib.nullcontext, 1) == (cost, cost)
    assert len(calls) == 2 * pairs


class Gate(nn.Module):
    def forward(self, h):
        return h * (h.sum() > 0)  # the multiply saves the one-byte bool (h needs no saving: the bool has no grad)


class Gated(nn.Module):
    """gate saves one bool byte inside; its input is saved outside too (h * w), so a
    checkpoint of gate frees exactly one byte."""

    def __init__(self):
        super().__init__()
        self.fc, self.gate, self.head = nn.Linear(8, 8), Gate(), nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(8))

    def forward(self, x):
        h = self.fc(x)
        return self.head(self.gate(h)) + h * self.w


def test_a_module_freeing_one_byte_is_advised(monkeypatch):
    torch.manual_seed(0)
    model, x = Gated(), torch.randn(4, 8)
    assert torch_drop(model, x, "gate") == 1
    _fixed_seconds(monkeypatch, model, {"": 10.0, "gate": 0.001})
    assert _advised(model, x, {"gate": 1}, count=3) == ["gate"]


class Pair(nn.Module):
    def forward(self, a, b):
        return torch.tanh(torch.tanh(torch.tanh(torch.tanh(a + b))))


class TwoInputs(nn.Module):
    """pair is called with two tensors nobody saves (the add saves nothing): its checkpoint
    must keep both, and frees the three tanh outputs saved inside."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.pair, self.head = nn.Linear(8, 8), nn.Linear(8, 8), Pair(), nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.pair(self.fc1(x), self.fc2(x)))


def test_a_module_s_inputs_nobody_saved_are_each_kept_by_its_checkpoint(monkeypatch):
    torch.manual_seed(0)
    model, x = TwoInputs(), torch.randn(4, 8)
    drop = torch_drop(model, x, "pair")
    assert drop == (3 - 2) * 4 * 8 * 4  # three outputs freed, two inputs kept: torch's count
    _fixed_seconds(monkeypatch, model, {"": 10.0, "pair": 0.001})
    assert _advised(model, x, {"pair": drop}, count=3) == ["pair"]
