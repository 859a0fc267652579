"""`memory`'s trial of a stack in segments (footprint/checkpoint.py's `_segment_trial`): which
segment count it advises, and the fields of the trial beyond its bytes and gradients
(test_memory_segments.py has those).

The truth is torch's: `checkpoint_sequential` run by the test for every count the trial
measures, its saved bytes counted with saved_tensors_hooks, its peak read from torch's CPU
allocator events (the legacy profiler with profile_memory, enabled by the test). The advised
count is the one with the smallest peak, else (no peak measured: a profiler of the user's own
was running) the smallest saved bytes, ties to the fewer segments. The forward and timed runs'
seconds are the machine's, so they are fixed by the test where a field carries them.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.autograd import profiler_legacy
from torch.utils.checkpoint import checkpoint_sequential

import gradcli
from gradcli.footprint.segments import candidates
from memory_truth import allocator_peak, own_storages, saved_bytes  # torch's bytes and peak


def square(out):
    return out.pow(2).mean()


def waist(widths=(8, 8, 8, 128, 128, 8, 8, 8, 8)):
    """16 layers (Linear, Tanh) narrow at both ends and wide in the middle: torch's peak is
    smallest at 4 segments, its saved bytes at 3 (tied with 4), at batch 64."""
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers)


def torch_segments(model, x):
    """count -> (torch's peak, torch's saved bytes) with checkpoint_sequential in that many segments."""
    params, own = list(model.parameters()), own_storages(model, x)
    found = {}
    for count in candidates(len(model)):
        def run(count=count):
            return square(checkpoint_sequential(model, count, x, use_reentrant=False))
        found[count] = (allocator_peak(run, params), saved_bytes(run, own))
    return found


def stack_trial(result):
    (trial,) = [trial for trial in result.checkpoint if trial.segments is not None]
    return trial


class TimedRuns:
    """Stands for checkpoint.py's timed_pair (timings only, repeated until 0.3 s of CPU): what
    the configuration it is given saves, counted by the test, and fixed seconds."""

    def __init__(self, monkeypatch, model, x, seconds=(1.0, 2.0)):
        from gradcli.footprint import checkpoint as advice

        self.model, self.x, self.seconds, self.saved = model, x, seconds, []
        monkeypatch.setattr(advice, "timed_pair", self.timed_pair)

    def timed_pair(self, run, params, applied, repeats):
        with applied():
            self.saved.append(saved_bytes(lambda: square(self.model(self.x)), own_storages(self.model, self.x)))
        return self.seconds


def test_the_count_with_torch_s_smallest_peak_is_advised_not_the_one_saving_least(monkeypatch):
    torch.manual_seed(0)
    model, x = waist(), torch.randn(64, 8)
    truth = torch_segments(model, x)
    by_peak = min(truth, key=lambda count: (*truth[count], count))
    by_bytes = min(truth, key=lambda count: (truth[count][1], count))
    assert by_peak != by_bytes and by_peak != min(truth)  # the peak decides, not the bytes or the count
    timed = TimedRuns(monkeypatch, model, x)
    result = gradcli.memory(model, x, loss=square, checkpoint=1, create_graph=False, repeats=1)
    trial = stack_trial(result)
    assert trial.segments == by_peak
    plain = saved_bytes(lambda: square(model(x)), own_storages(model, x))
    assert (trial.saved_bytes_before, trial.saved_bytes_after) == (plain, truth[by_peak][1])
    assert trial.predicted_freed == plain - truth[by_peak][1]
    # the peaks are measured above different starts; their difference is torch's
    plain_peak = allocator_peak(lambda: square(model(x)), list(model.parameters()))
    assert trial.peak_after - trial.peak_before == truth[by_peak][0] - plain_peak
    # the timed runs ran the advised count, and their seconds are the trial's
    assert timed.saved == [truth[by_peak][1]]
    assert (trial.seconds_before, trial.seconds_after) == timed.seconds
    # torch's gradients with and without the advised checkpoint: bit for bit equal, no difference
    params = list(model.parameters())
    tried = torch.autograd.grad(square(checkpoint_sequential(model, by_peak, x, use_reentrant=False)), params)
    equal = all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(square(model(x)), params), tried))
    assert (trial.gradients_equal, trial.max_abs_diff, trial.agrees) == (equal, 0.0, True) and equal


def test_without_a_peak_the_count_saving_least_is_advised(monkeypatch):
    """A profiler of the user's own is running: no peak is measured, the saved bytes decide."""
    torch.manual_seed(0)
    model, x = waist(), torch.randn(64, 8)
    truth = torch_segments(model, x)
    by_bytes = min(truth, key=lambda count: (truth[count][1], count))
    TimedRuns(monkeypatch, model, x)
    with profiler_legacy.profile():
        result = gradcli.memory(model, x, loss=square, checkpoint=1, create_graph=False, repeats=1)
    trial = stack_trial(result)
    assert (trial.segments, trial.peak_before, trial.peak_after) == (by_bytes, None, None)
    assert trial.saved_bytes_after == truth[by_bytes][1]


class Block(nn.Module):
    def __init__(self, width=8, hidden=32):
        super().__init__()
        self.up, self.down = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(x)))


class Listed(nn.Module):
    """Four blocks in a ModuleList that forward chains (never called itself), and a head."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Inner(nn.Module):
    """A Sequential of four blocks below the model's own path, called as one module."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(*(Block() for _ in range(4)))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.body(x))


@pytest.mark.parametrize(("model", "stack", "seconds"), [
    (Inner, "body", lambda fixed: fixed["body"]),
    (Listed, "blocks", lambda fixed: sum(fixed[f"blocks.{k}"] for k in range(4))),
], ids=["a Sequential: its own call", "a ModuleList: its blocks' calls"])
def test_the_stack_s_forward_seconds_are_its_own_call_or_its_blocks(monkeypatch, model, stack, seconds):
    """The forward times are the machine's: fixed here, each module its own power of two, so
    that a sum of the wrong modules' times cannot come out equal (a ModuleList has none: it is
    never called)."""
    from gradcli.footprint import checkpoint as advice

    torch.manual_seed(0)
    model, x = model(), torch.randn(16, 8)
    fixed = {path: 2.0 ** -k for k, (path, module) in enumerate(model.named_modules())
             if not isinstance(module, nn.ModuleList)}
    fixed[""] = 10.0
    monkeypatch.setattr(advice, "forward_seconds", lambda run: (dict(fixed), fixed[""]))
    TimedRuns(monkeypatch, model, x)
    trial = stack_trial(gradcli.memory(model, x, loss=square, checkpoint=1, create_graph=False, repeats=1))
    assert trial.module == stack and trial.module_class == type(model.get_submodule(stack)).__name__
    assert trial.forward_seconds == seconds(fixed)
