"""Checkpoint advice that is proven: predict from the saves, then rerun and measure.

Checkpointing a module (torch.utils.checkpoint, use_reentrant=False) drops what the nodes
inside it saved and recomputes it in backward; what it keeps instead is the module's inputs.
So, from the plain run's saves, a storage is freed when every node that saved it ran inside
the module, it is an activation or an autocast copy (parameters stay alive anyway), and it
is not one of the module's inputs; a module input nobody saved before becomes saved.

The modules are ranked by bytes freed per second of their own forward (the work
recomputation repeats), measured with forward hooks in a plain run. Modules whose forward is
more than 80% of the model's are left out (recomputing them is most of a second forward,
and their recomputation in backward needs about what they freed), and so are modules nested
in or around one already chosen. For the best few, the run is repeated with the checkpoint
applied: saved bytes, peak, time and every gradient measured again, and the gradients
compared bit for bit with the plain run's.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from ..targets.modules import ModuleHooks
from .kinds import storage_of
from .peak import PeakMeter
from .result import KEPT_FOR_BACKWARD, CheckpointTrial
from .saved import SavedCounter, loss_nodes
from .segments import Stack, candidates, find_stack, patched_forward, segmented

if TYPE_CHECKING:
    from .result import MemoryResult
    from .replay import Run

#: A module whose forward takes more than this share of the model's is not advised.
MOST_OF_FORWARD = 0.8


class ModuleInputs:
    """Context manager: the storages of the tensors each module is called with, by path;
    `settle` (right after forward) says which of them were saved and how many bytes of them
    a checkpoint would newly save."""

    def __init__(self, model: Any) -> None:
        self.names = {id(m): path for path, m in model.named_modules()}
        self._found: dict[str, dict[int, tuple[int, Any]]] = {}  # path -> storage -> (bytes, weak ref)
        self.saved: dict[str, set[int]] = {}  # path -> numbers of its saved input storages
        self.added: dict[str, int] = {}  # path -> bytes of its inputs nobody saved
        self._hooks = ModuleHooks(names=self.names, enter=self._called)

    def __enter__(self) -> "ModuleInputs":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)

    def _called(self, path: str, module: Any, args: tuple[Any, ...]) -> None:
        """A forward pre-hook's: `args`, forward's positional arguments, always a tuple."""
        from torch.multiprocessing.reductions import StorageWeakRef

        found = self._found.setdefault(path, {})
        for value in args:
            storage = storage_of(value) if isinstance(value, torch.Tensor) else None
            if storage is not None and storage.data_ptr() not in found:
                found[storage.data_ptr()] = (storage.nbytes(), StorageWeakRef(storage))

    def settle(self, numbers: dict[int, int], own: set[int]) -> None:
        """While forward's saves are alive: an input whose storage died since was saved by
        nobody (a saved storage is alive), and one alive at a saved address is that storage."""
        for path, found in self._found.items():
            saved, added = set(), 0
            for ptr, (nbytes, ref) in found.items():
                if not ref.expired() and ptr in numbers:
                    saved.add(numbers[ptr])
                elif ptr not in own:
                    added += nbytes
            self.saved[path], self.added[path] = saved, added
        self._found.clear()


def predicted_freed(result: MemoryResult, path: str, saved_inputs: set[int], added: int) -> int:
    """The saved bytes checkpointing `path` frees, less the inputs it must save instead."""
    inside = {n.order for n in result.nodes if n.module is not None and (n.module == path or n.module.startswith(path + "."))}
    if not inside:
        return 0
    savers: dict[int, set[int]] = {}
    size: dict[int, int] = {}
    kept: dict[int, bool] = {}
    for node in result.nodes:
        for t in node.tensors:
            savers.setdefault(t.storage, set()).add(node.order)
            size[t.storage] = t.bytes
            kept[t.storage] = t.kind in KEPT_FOR_BACKWARD
    freed = sum(size[s] for s, who in savers.items() if kept[s] and who <= inside and s not in saved_inputs)
    return freed - added


def forward_seconds(run: Run) -> tuple[dict[str, float], float]:
    """Each module's own forward time (summed over its calls), and the whole forward's."""
    names = {id(m): path for path, m in run.model.named_modules()}
    clock = _clock(run.device)
    started: list[float] = []
    spent: dict[str, float] = {}

    def enter(path: str, module: Any, args: Any) -> None:
        started.append(clock())

    def leave(path: str, module: Any, args: Any, output: Any) -> None:
        if started:
            spent[path] = spent.get(path, 0.0) + clock() - started.pop()

    try:
        with ModuleHooks(names=names, enter=enter, leave=leave), torch.no_grad(), one_thread(run.device):
            begun = clock()
            with run.forward_context():
                run.forward()
            whole = clock() - begun
    finally:
        run.forget()
    return spent, whole


def choose(result: MemoryResult, run: Run, inputs: ModuleInputs, count: int) -> list[tuple[str, int, float]]:
    """The best `count` modules to checkpoint: (path, predicted freed bytes, forward seconds)."""
    spent, whole = forward_seconds(run)
    ranked = []
    for path, seconds in spent.items():
        if not path or seconds > MOST_OF_FORWARD * whole:
            continue
        freed = predicted_freed(result, path, inputs.saved.get(path, set()), inputs.added.get(path, 0))
        if freed > 0:
            ranked.append((freed / max(seconds, 1e-9), path, freed, seconds))
    ranked.sort(key=lambda row: (-row[0], row[1]))
    chosen: list[tuple[str, int, float]] = []
    for _, path, freed, seconds in ranked:
        if len(chosen) == count:
            break
        if any(_nested(path, other) for other, _, _ in chosen):
            continue
        chosen.append((path, freed, seconds))
    return chosen


def _nested(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


class Measured:
    """One configuration's forward + backward: saved bytes, peak above the start, gradients."""

    def __init__(self, run: Run, trainable: list[Any], own: set[int]) -> None:
        counter = SavedCounter()
        with PeakMeter(run.device) as meter:
            with counter:
                value = run.loss()
            for _ in counter.saved_by(value.grad_fn, loss=loss_nodes(value, run.output)):
                pass  # the --loss's saves, made where the hooks do not reach, are read back
            # What backward alone keeps alive: a checkpointed module's parameters are not saved
            # (recomputation saves them in backward), but they take the same memory either way.
            self.saved_bytes = counter.alive_bytes(own)
            counter.release()
            self.gradients = _grads(value, trainable)
            del value
            run.forget()
        self.peak = meter.peak


def timed_pair(run: Run, trainable: list[Any], applied: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """The median forward + backward time, plain and with the checkpoint `applied()`, the two runs
    alternating so that both see the same load. On CPU they run on one intra-op thread: the
    ratio is then the recomputation's work, not the machine's contention (measured here at a
    load of 12 on 2 cores: two threads gave the same plain run 35-95 ms from one repeat to the
    next, one thread 3.5-4.7 ms). A small model's run lasts milliseconds, where one disturbance
    is most of it: pairs repeat at least `repeats` times and until both sides have run for
    0.3 s (at most 15 times)."""
    plain: list[float] = []
    tried: list[float] = []
    with one_thread(run.device):
        while len(plain) < repeats or (sum(plain) + sum(tried) < 0.3 and len(plain) < 15):
            plain.append(_timed(run, trainable))
            with applied():
                tried.append(_timed(run, trainable))
    return statistics.median(plain), statistics.median(tried)


@contextlib.contextmanager
def one_thread(device: Any) -> Iterator[None]:
    """On CPU, torch's intra-op threads set to one meanwhile (timing: see timed_pair)."""
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _timed(run: Run, trainable: list[Any]) -> float:
    clock = _clock(run.device)
    begun = clock()
    value = run.loss()
    _grads(value, trainable)
    del value
    run.forget()
    return clock() - begun


def _clock(device: Any) -> Any:
    """On CPU the process's CPU time: the work done, which other processes on a shared machine
    do not inflate as they do wall-clock time. On a GPU, wall-clock time after a synchronize,
    since the work is the device's."""
    if device.type == "cuda":
        import torch

        def clock() -> float:
            torch.cuda.synchronize(device)
            return time.perf_counter()

        return clock
    return time.process_time


def _grads(value: Any, trainable: list[Any]) -> list[Any]:
    return list(torch.autograd.grad(value, trainable, allow_unused=True))


@contextlib.contextmanager
def checkpointed(module: Any) -> Iterator[None]:
    """`module`'s forward run through torch.utils.checkpoint (use_reentrant=False) meanwhile."""
    from torch.utils.checkpoint import checkpoint

    original = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(original, *args, use_reentrant=False, **kwargs)

    with patched_forward(module, forward):
        yield


def advise(result: MemoryResult, run: Run, named: list[tuple[str, Any]], count: int, repeats: int,
           inputs: ModuleInputs, own: set[int]) -> list[CheckpointTrial]:
    """Choose the best `count` modules and prove each by a rerun; `own` are the storages of
    the parameters, buffers and inputs (not counted as kept for backward)."""
    chosen = choose(result, run, inputs, count)
    stack = find_stack(result, run)
    if not chosen and stack is None:
        return []
    trainable = [(name, p) for name, p in named if p.requires_grad]
    params = [p for _, p in trainable]
    plain = Measured(run, params, own)
    trials = []
    for path, freed, seconds in chosen:
        module = run.model.get_submodule(path)
        try:
            with checkpointed(module):
                tried = Measured(run, params, own)
        except RuntimeError as err:  # torch's CheckpointError: a recomputation that differs
            # XXX: seen for a TransformerEncoderLayer inside a ModuleList (torch 2.14.1), whose
            # recomputation saved other tensors than its forward; not understood yet.
            run.forget()
            result.notes.append(f"checkpointing {path} alone raised in backward ({str(err).strip().splitlines()[0]}): not advised")
            continue
        before, after = timed_pair(run, params, lambda module=module: checkpointed(module), repeats)
        equal, diff, agrees = _same_gradients(trainable, plain.gradients, tried.gradients, run.amp)
        trials.append(CheckpointTrial(
            module=path, module_class=type(module).__name__, forward_seconds=seconds, predicted_freed=freed,
            saved_bytes_before=plain.saved_bytes, saved_bytes_after=tried.saved_bytes,
            seconds_before=before, seconds_after=after, gradients_equal=equal,
            max_abs_diff=diff, agrees=agrees, peak_before=plain.peak, peak_after=tried.peak,
        ))
    if stack is not None:  # the whole stack in segments first: it frees what no one module can
        trials.insert(0, _segment_trial(run, stack, trainable, plain, own, repeats))
    return trials


def _segment_trial(run: Run, stack: Stack, trainable: list[tuple[str, Any]], plain: Measured, own: set[int],
                   repeats: int) -> CheckpointTrial:
    """The stack checkpointed in the number of segments whose measured peak (else saved
    bytes) is smallest, among the counts around √n, with its gradients against the plain run's."""
    params = [p for _, p in trainable]
    measured = {}
    for segments in candidates(len(stack.layers)):
        with segmented(stack, segments):
            measured[segments] = Measured(run, params, own)
    best = min(measured, key=lambda k: (measured[k].peak if measured[k].peak is not None else measured[k].saved_bytes,
                                        measured[k].saved_bytes, k))
    tried = measured[best]
    spent, _ = forward_seconds(run)
    seconds = spent.get(stack.path)
    if seconds is None:  # a ModuleList is never called itself: its blocks' own forward times
        paths = {id(m): path for path, m in run.model.named_modules()}
        seconds = sum(spent.get(paths.get(id(layer), ""), 0.0) for layer in stack.layers)
    before, after = timed_pair(run, params, lambda: segmented(stack, best), repeats)
    equal, diff, agrees = _same_gradients(trainable, plain.gradients, tried.gradients, run.amp)
    return CheckpointTrial(
        module=stack.path, module_class=type(stack.module).__name__, forward_seconds=seconds,
        predicted_freed=plain.saved_bytes - tried.saved_bytes, saved_bytes_before=plain.saved_bytes,
        saved_bytes_after=tried.saved_bytes, seconds_before=before, seconds_after=after, gradients_equal=equal,
        max_abs_diff=diff, agrees=agrees, peak_before=plain.peak, peak_after=tried.peak, segments=best,
    )


def _same_gradients(named: list[tuple[str, Any]], plain: list[Any], tried: list[Any], amp: str | None) -> tuple[bool, float, bool]:
    """Bit for bit equal; else the largest difference and whether compare's tolerance holds.

    A complex gradient's difference is its modulus (the imaginary part counts as much as the
    real one), held to the precision of its parts (complex64's is float32's)."""
    from ..comparison.gradients import Flag, Tolerance, compare_gradient

    equal, diff, agrees = True, 0.0, True
    for (name, param), a, b in zip(named, plain, tried):
        if a is None or b is None:
            if (a is None) != (b is None):
                equal = agrees = False
            continue
        if torch.equal(a, b):
            continue
        equal = False
        wide = torch.complex128 if a.is_complex() else torch.float64
        diff = max(diff, float((a.to(wide) - b.to(wide)).abs().max()))
        dtype = getattr(torch, amp) if amp else a.dtype.to_real()
        tolerance = Tolerance(dtype if dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16) else torch.float32)
        if a.is_complex():  # the parts side by side: the same norms as the complex values'
            a, b = torch.view_as_real(a.resolve_conj()), torch.view_as_real(b.resolve_conj())
        if compare_gradient(name, a, b, tolerance.value).flags != [Flag.AGREES]:
            agrees = False
    return equal, diff, agrees
