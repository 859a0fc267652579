"""Counting what autograd saves for backward, as it is saved, and which node saved it.

`torch.autograd.graph.saved_tensors_hooks(pack, unpack)` sees every tensor an operation saves
for its backward (the tensors behind `grad_fn._saved_*`, and a custom Function's
`ctx.save_for_backward`). `pack` notes the tensor's storage, size, shape and dtype, and
returns a small `_Held` box with the tensor in it, so the graph keeps exactly what it would
have kept: when backward frees a node's saved tensors, the box and the tensor go with it.

The pack hook is not told which node is saving, but an operation makes its node before it
saves anything, and each new node takes the thread's next sequence number: a tensor packed
when the counter reads n was saved by the node whose `_sequence_nr()` is n - 1 (checked on
torch 2.14: addmm, relu, log_softmax, nll_loss, custom Functions). So nodes and saves pair up
without reading any saved tensor back, which matters: reading one back through another
hook's unpack (a model's own torch.utils.checkpoint) would recompute its region.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Iterator

from ..graph.nodes import inputs_of, is_accumulate, reachable, saved_names, walk
from ..targets.flatten import tensors_in
from .kinds import own_bytes, storage_of


@dataclass
class Packed:
    """One tensor as it was saved: where its storage is and how big it is (no tensor kept)."""

    index: int  # in pack order, which is forward order
    storage: int  # the storage's data_ptr: tensors sharing memory share it
    storage_bytes: int  # what keeping the storage alive costs
    shape: tuple[int, ...]
    dtype: str
    cast_of: int | None = None  # id() of the parameter this is a dtype copy of (autocast)
    node: int = -1  # the sequence number of the node that saved it


class _Held:
    """The box a saved tensor lives in while the graph holds it."""

    __slots__ = ("tensor", "index", "version", "__weakref__")

    def __init__(self, tensor: Any, index: int) -> None:
        self.tensor, self.index, self.version = tensor, index, tensor._version


class SavedCounter:
    """Context manager: while active, every saved tensor is noted in `packed` (in order)."""

    def __init__(self) -> None:
        self.packed: list[Packed] = []
        self._alive: list[weakref.ref] = []
        self._unpacked: list[int] = []
        self._keep: list[_Held] = []
        self._hooks: Any = None

    def __enter__(self) -> "SavedCounter":
        import torch

        self._sequence_nr = torch._C._autograd._get_sequence_nr
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)

    def _pack(self, tensor: Any) -> _Held:
        index = len(self.packed)
        storage = storage_of(tensor)
        if storage is not None:
            where, size = storage.data_ptr(), storage.nbytes()
        else:  # what it holds (a sparse tensor's indices and values), at an address no storage has
            where, size = -1 - index, own_bytes(tensor)
        grad_fn = tensor.grad_fn
        cast_of = None
        if grad_fn is not None:  # autocast's copy of a weight is saved as itself or a view (w.t())
            base_fn = tensor._base.grad_fn if tensor._is_view() and tensor._base is not None else grad_fn
            if base_fn is not None and type(base_fn).__name__ == "ToCopyBackward0":
                source = inputs_of(base_fn)[0]
                cast_of = id(source.variable) if source is not None and is_accumulate(source) else None
        self.packed.append(Packed(index, where, size, tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), cast_of,
                                  self._sequence_nr() - 1))
        # A tensor with a node would hold that node, which may be the very node saving it (a
        # saved output): the box keeps its data only, as autograd itself stores outputs.
        held = _Held(tensor.detach() if grad_fn is not None else tensor, index)
        self._alive.append(weakref.ref(held))
        return held

    def _unpack(self, held: _Held) -> Any:
        self._unpacked.append(held.index)
        tensor = held.tensor
        if tensor._version != held.version:
            # Autograd checks a saved tensor's version itself only when no hook packed it: with
            # hooks the modified value would silently be used. Raise what torch raises.
            shape = "x".join(map(str, tensor.shape)) or "()"
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: a {str(tensor.dtype).removeprefix('torch.')} tensor of shape {shape} is at version "
                f"{tensor._version}; expected version {held.version} instead.")
        return tensor

    def release(self) -> None:
        """Let go of the tensors read back from nodes (the nodes keep them, until backward)."""
        self._keep.clear()

    def alive(self) -> list[int]:
        """The boxes some graph still holds (by index)."""
        return [k for k, ref in enumerate(self._alive) if ref() is not None]

    def alive_bytes(self, leaving_out: set[int] = frozenset()) -> int:  # type: ignore[assignment]
        """The bytes of the distinct storages the boxes still held keep alive, leaving out the
        storages `leaving_out` names (the parameters and inputs: alive without backward)."""
        alive = (self.packed[k] for k in self.alive())
        return sum({p.storage: p.storage_bytes for p in alive if p.storage not in leaving_out}.values())

    def storage_refs(self, indices: Any) -> dict[int, tuple[Any, int]]:
        """storage -> (a weak reference to it, its bytes), for the boxes `indices` still held:
        whether backward let them go, without keeping them alive meanwhile."""
        from torch.multiprocessing.reductions import StorageWeakRef

        refs: dict[int, tuple[Any, int]] = {}
        for k in indices:
            held = self._alive[k]()
            packed = self.packed[k]
            if held is not None and packed.storage not in refs and packed.storage >= 0:
                refs[packed.storage] = (StorageWeakRef(held.tensor.untyped_storage()), packed.storage_bytes)
        return refs

    def saved_by(self, root: Any, loss: set[int] = frozenset()) -> Iterator[tuple[Any, list[int]]]:  # type: ignore[assignment]
        """Each node reachable from `root` (each once) with the saves it holds (by index).

        The nodes whose id is in `loss` (what the loss built from forward's output) are paired
        by reading their saved tensors back instead: the --loss is built in gradcli's own
        thread, where these thread-local hooks do not reach and sequence numbers count from
        their own start; no other hook can be in the way there."""
        by_node: dict[int, list[int]] = {}
        for packed in self.packed:
            by_node.setdefault(packed.node, []).append(packed.index)
        for node in walk(root):
            indices = self._read(node) if id(node) in loss else by_node.get(node._sequence_nr())
            if indices:
                yield node, indices

    def _read(self, node: Any) -> list[int]:
        """The saves of `node`, read back: ours by their box, others noted as if packed now."""
        indices = []
        for name in saved_names(type(node), functions=True):
            try:
                self._unpacked.clear()
                values = getattr(node, name)
            except RuntimeError:  # freed already
                continue
            if self._unpacked:  # saved through the hooks: the box says which
                indices += self._unpacked
                continue
            for value in values if isinstance(values, (tuple, list)) else (values,):
                if hasattr(value, "untyped_storage") and hasattr(value, "grad_fn"):
                    held = self._pack(value)
                    self.packed[held.index].node = node._sequence_nr()
                    self._keep.append(held)  # the node holds the tensor itself; this box is ours
                    indices.append(held.index)
        return sorted(set(indices))


def loss_nodes(value: Any, output: Any) -> set[int]:
    """The nodes the loss made from forward's output (ids): those between the two."""
    stop = {id(t.grad_fn) for t in tensors_in(output) if t.grad_fn is not None}
    return reachable(value.grad_fn, enter=lambda node: id(node) not in stop and not is_accumulate(node))
