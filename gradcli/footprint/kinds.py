"""What a saved storage is: a parameter, a buffer, an input of forward, autocast's copy of a
parameter, or else an activation (a tensor forward computed, alive only for backward).

Storages are compared by address: a parameter's view (`weight.t()`, which addmm saves) is the
parameter's storage, and the model's own tensors are all alive while forward runs, so no
other storage can have their addresses.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch


def storage_of(tensor: Any) -> Any:
    """The untyped storage behind `tensor`, or None where it has no single one (a sparse
    tensor, a tensor subclass): such a tensor is counted by its own elements instead."""
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


def own_bytes(tensor: Any) -> int:
    """The bytes a tensor without a single storage holds: a sparse tensor's indices and values
    (not its dense size, which it never allocates), else its elements."""
    layout = tensor.layout
    if layout == torch.sparse_coo:
        parts = (tensor._indices(), tensor._values())
    elif layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = (tensor.crow_indices(), tensor.col_indices(), tensor.values())
    elif layout in (torch.sparse_csc, torch.sparse_bsc):
        parts = (tensor.ccol_indices(), tensor.row_indices(), tensor.values())
    else:
        return tensor.numel() * tensor.element_size()
    return sum(part.numel() * part.element_size() for part in parts)


class Identities:
    """Which storages are the model's parameters and buffers and forward's inputs."""

    def __init__(self, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.names: dict[int, tuple[str, str]] = {}  # storage -> (kind, name)
        self.params: dict[int, str] = {id(p): name for name, p in model.named_parameters()}
        for label, values in (("input", _named_inputs(model, args, kwargs)),
                              ("buffer", dict(model.named_buffers())), ("parameter", dict(model.named_parameters()))):
            for name, tensor in values.items():
                storage = storage_of(tensor)
                if storage is not None:
                    self.names[storage.data_ptr()] = (label, name)

    def of(self, storage: int, cast_of: int | None) -> tuple[str, str | None]:
        if storage in self.names:
            return self.names[storage]
        if cast_of is not None and cast_of in self.params:
            return "cast", self.params[cast_of]
        return "activation", None


def _named_inputs(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        names = [p for p in inspect.signature(model.forward).parameters]
    except (TypeError, ValueError):
        names = []
    found = {}
    for k, value in enumerate(args):
        if isinstance(value, torch.Tensor):
            found[names[k] if k < len(names) else f"input {k}"] = value
    found.update({k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)})
    return found
