"""What torch itself says a forward + backward keeps, for the memory tests: the bytes saved for
backward (saved_tensors_hooks, each storage once) and the peak of tensor memory (torch's CPU
allocator events, read by the test's own legacy profiler)."""

from __future__ import annotations

import gc

import torch
from torch.autograd import profiler_legacy


def own_storages(model, *inputs):
    """The storages of the parameters and inputs: alive without backward, never counted."""
    return {t.untyped_storage().data_ptr() for t in (*model.parameters(), *inputs)}


def saved_bytes(run, own):
    """The bytes of the storages saved for backward while `run()` builds the loss, each once,
    the storages `own` names left out."""
    loss, saved = loss_and_saved_bytes(run, own)
    del loss
    return saved


def loss_and_saved_bytes(run, own):
    """`saved_bytes`, with the loss `run()` built (its graph still alive, for a backward)."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in own:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = run()
    return loss, sum(storages.values())


def allocator_peak(run, params):
    """The highest tensor bytes live above the start during `run()` and backward to `params`,
    from torch's CPU allocator events (each allocation and free, in time order).

    The cyclic garbage collector is off meanwhile: with it on, a collection falling inside the
    window changed the peak from run to run (test_stack_trial.py failed 4 runs of 11 of
    tests/footprint); off, none did in 15. A gc.collect() first cured it too, at 0.13 s a call
    here (3.4 s more for the two files that measure peaks). What the collection changed is not
    established: garbage made before the window, with or without a profiler on, and collected
    inside it leaves the peak as it is
    (test_memory.py::test_garbage_collected_during_the_run_does_not_lower_the_peak).
    """
    collecting = gc.isenabled()
    gc.disable()
    torch._C._autograd._enable_profiler_legacy(profiler_legacy.profile(profile_memory=True).config())
    try:
        loss = run()
        grads = torch.autograd.grad(loss, params)
        del loss, grads
    finally:
        threads = torch._C._autograd._disable_profiler_legacy()
        if collecting:
            gc.enable()
    events = sorted(((e.start_us(), e.cpu_memory_usage()) for thread in threads for e in thread
                     if e.kind() == "memory_alloc"), key=lambda pair: pair[0])
    live = peak = 0
    for _, change in events:
        live += change
        peak = max(peak, live)
    return peak
