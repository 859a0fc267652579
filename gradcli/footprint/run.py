"""`memory_of`, the judge of `gradcli memory` and `gradcli.memory(model, *inputs, loss=...)`
(both run it through targets/model.py): one watched forward + backward, and what backward kept.

The run, in order (the model is used as given; its `.grad` is not touched, and buffers that
forward updates in place are put back):

1. forward under targets/record.py's ForwardRecorder (each node's module and user line) and a
   SavedCounter (every saved tensor), inside a PeakMeter that lasts until backward is done;
2. the graph walked from the loss to pair each saved tensor with its node (saved.py);
3. a plain backward (`torch.autograd.grad`, no retain_graph): afterwards the storages that
   died are what `retain_graph=True` would have kept;
4. another forward, and backward with `create_graph=True` counted too: what the gradient's
   own graph saves on top;
5. checkpoint advice, proven by rerunning (checkpoint.py).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..errors import UsageError
from ..targets.model import model_dtype, restored_buffers, scalar_loss
from ..targets.record import ForwardRecorder, origin_of
from .checkpoint import ModuleInputs, advise
from .peak import PeakMeter, tensor_bytes
from .kinds import Identities
from .replay import LossFn, Run
from .result import MemoryResult, NodeSaved, SavedTensor
from .saved import SavedCounter, loss_nodes

#: What memory needs a target to be (the end of the refusal of any other, targets/model.py's on_model).
PURPOSE = "memory measures what a model's forward and backward keep"
#: --amp takes the dtypes autocast computes in.
AMP_DTYPES = ("bfloat16", "float16")


def memory_of(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    loss_fn: LossFn,
    *,
    depth: int | None = None,
    amp: str | None = None,
    checkpoint: int = 3,
    create_graph: bool = True,
    repeats: int = 2,
) -> MemoryResult:
    """memory with forward's arguments given as args and kwargs (the CLI binds them by name).

    `checkpoint` is how many modules to prove checkpoint advice on (0: none); `repeats` how
    many times each timed run is repeated (the fastest counts)."""
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"memory needs a torch.nn.Module, not {type(model).__name__}")
    if depth is not None and depth < 0:
        raise UsageError("--depth must be 0 or more")
    if checkpoint < 0 or repeats < 1:
        raise UsageError("checkpoint must be 0 or more and repeats 1 or more")
    if amp is not None and amp not in AMP_DTYPES:
        raise UsageError(f"--amp {amp}: autocast computes in {' or '.join(AMP_DTYPES)}")
    named = list(model.named_parameters())
    trainable = [p for _, p in named if p.requires_grad]
    inputs = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
    device = _device_of(model, inputs)
    run = Run(model, args, kwargs, loss_fn, amp, device)
    result = MemoryResult(
        model=type(model).__name__, device=str(device), dtype=model_dtype(model), amp=amp, nodes=[], by_kind={},
        baseline_bytes=tensor_bytes([*model.parameters(), *model.buffers(), *inputs]), peak_bytes=None,
        peak_how="none", end_bytes=None, freed_by_backward=0, create_graph_bytes=None, depth=depth,
        module_types={path: type(m).__name__ for path, m in model.named_modules()},
    )
    with restored_buffers(model):
        names = {id(m): path for path, m in model.named_modules()}
        recorder, counter, module_inputs = ForwardRecorder(names), SavedCounter(), ModuleInputs(model)
        with PeakMeter(device) as meter:
            with run.forward_context(), counter, recorder, module_inputs:
                value = scalar_loss(loss_fn(run.forward()))
            result.loss = float(value.detach())
            identities = Identities(model, args, kwargs)
            reached, numbers = _nodes(result, counter, value, run.output, identities)
            module_inputs.settle(numbers, set(identities.names))
            result.module_order = list(recorder.recording.modules)
            unreached = set(counter.alive()) - reached
            result.unreached_bytes = sum({counter.packed[k].storage: counter.packed[k].storage_bytes for k in unreached}.values())
            storages = counter.storage_refs(sorted(reached))
            counter.release()
            grads, result.error = _gradients(value, trainable, create_graph=False)
            del value
            run.forget()
        del grads
        result.peak_how, result.end_bytes = meter.how, meter.end
        if meter.peak is not None:
            result.peak_bytes = result.baseline_bytes + meter.peak
        result.freed_by_backward = sum(size for ref, size in storages.values() if ref.expired())
        del storages
        if result.error is None and create_graph:
            result.create_graph_bytes = _create_graph_adds(run, trainable)
        if result.error is None and checkpoint and trainable and result.nodes:  # something to differentiate
            result.checkpoint = advise(result, run, named, checkpoint, repeats, module_inputs, set(identities.names))
    _explain(result)
    return result


#: memory_of's options, defined once by its keyword-only parameters.
RUN_OPTIONS = tuple(
    name for name, p in inspect.signature(memory_of).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
)


def _nodes(result: MemoryResult, counter: SavedCounter, value: Any, output: Any, identify: Identities) -> tuple[set[int], dict[int, int]]:
    """Fill result.nodes (forward order) and by_kind from the graph behind `value`; return the
    saved tensors (by index) the loss reaches, and each saved storage's number."""
    if value.grad_fn is None:
        return set(), {}
    found = sorted(counter.saved_by(value.grad_fn, loss=loss_nodes(value, output)), key=lambda pair: min(pair[1]))
    numbers: dict[int, int] = {}  # storage -> its number, in the order first saved
    first_saver: dict[int, int] = {}
    for k in sorted(k for _, indices in found for k in indices):
        storage = counter.packed[k].storage
        numbers.setdefault(storage, len(numbers))
        first_saver.setdefault(storage, k)
    reached = set()
    for order, (node, indices) in enumerate(found):
        origin = origin_of(node)
        tensors = []
        seen_here: set[int] = set()
        for k in indices:
            packed = counter.packed[k]
            reached.add(k)
            if packed.storage in seen_here:  # the same storage twice in one node (x * x)
                continue
            seen_here.add(packed.storage)
            kind, name = identify.of(packed.storage, packed.cast_of)
            first = first_saver[packed.storage] == k
            tensors.append(SavedTensor(packed.shape, packed.dtype, packed.storage_bytes, kind, numbers[packed.storage], first, name))  # type: ignore[arg-type]
            if first:
                result.by_kind[kind] = result.by_kind.get(kind, 0) + packed.storage_bytes
        result.nodes.append(NodeSaved(
            node.name(), order, origin.module if origin else None, origin.module_class if origin else None,
            origin.file if origin else None, origin.line if origin else None, origin.code if origin else None, tensors,
        ))
    return reached, numbers


def _gradients(value: Any, trainable: list[Any], *, create_graph: bool) -> tuple[tuple[Any, ...], str | None]:
    if not value.requires_grad or not trainable:
        return (None,) * len(trainable), None
    try:
        return torch.autograd.grad(value, trainable, allow_unused=True, create_graph=create_graph), None
    except RuntimeError as err:  # an autograd error (an in-place change of a saved tensor, ...)
        return (None,) * len(trainable), str(err).strip()


def _create_graph_adds(run: Run, trainable: list[Any]) -> int:
    """The bytes backward with create_graph=True saves for the gradient's own graph, beyond
    the storages forward saved (they are kept too: create_graph retains the graph)."""
    counter = SavedCounter()
    with counter:
        value = run.loss()
        forward = len(counter.packed)
        grads, error = _gradients(value, trainable, create_graph=True)
    forward_storages = {p.storage for p in counter.packed[:forward]}
    alive = set(counter.alive())
    added = {p.storage: p.storage_bytes for p in counter.packed[forward:] if p.index in alive and p.storage not in forward_storages}
    del value, grads
    run.forget()
    return sum(added.values()) if error is None else 0


def _explain(result: MemoryResult) -> None:
    """What the reader should know about the figures (not problems)."""
    if result.peak_how == "cpu":
        result.notes.append(
            "peak: tensor memory from torch's CPU allocator events during forward + backward, plus the "
            "parameters, buffers and inputs live before; the Python heap and memory the C allocator "
            "keeps after a free are not in it (the process's RSS has both)")
    elif result.peak_how == "none":
        result.notes.append("peak: not measured (another profiler was running, or the device has no allocator statistics)")
    if result.unreached_bytes:
        result.notes.append(
            f"{result.unreached_bytes:,} more bytes were saved where the walk from the loss does not reach: by an "
            "output the loss did not use, or a torch.utils.checkpoint's saved inputs; they stay alive as long as those")


def _device_of(model: Any, inputs: list[Any]) -> Any:
    for tensor in (*model.parameters(), *model.buffers(), *inputs):
        return tensor.device
    return torch.device("cpu")
