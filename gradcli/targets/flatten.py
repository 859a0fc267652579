"""The one flattener of what a model returns (or a torch call takes): its leaves, in order.

A model's output may be a tensor, a tuple or list (a namedtuple, torch's `return_types`), a
dict (an OrderedDict, transformers' `ModelOutput`, which is one), a dataclass, or any of these
nested; a container a user registered with torch's pytree (`torch.utils._pytree`) is opened
with the flatten function registered for it. Every command that looks for the tensors in an
output asks here, so a `ModelOutput`, a dataclass or a namedtuple reads the same everywhere
(outputs.py names the tensors for `--loss`; this finds them).

Leaves come in order: a container's items left to right, depth first (the order pytree's
`tree_leaves` gives for the containers both know). The containers torch's calls pass are
opened by hand rather than through pytree, which costs about three times as much per call:
the recorder flattens the arguments and result of every torch call a forward makes. A
container met twice on the way down (one that holds itself) is opened once.
"""

from __future__ import annotations

from typing import Any


def leaves(value: Any) -> list[Any]:
    """The leaves of `value`'s nested containers, in order (`value` itself when it is none)."""
    plain = _PLAIN if _nodes is not None else _load()
    if type(value) in plain:
        return [value]
    found: list[Any] = []
    opened: set[int] = set()
    pending = [value]
    while pending:
        item = pending.pop()
        if type(item) in plain:
            found.append(item)
            continue
        if isinstance(item, (tuple, list)):
            items: Any = item
        elif isinstance(item, dict):
            items = list(item.values())
        else:
            items = _items(item)
            if items is None:
                found.append(item)
                continue
        if id(item) in opened:
            continue
        opened.add(id(item))
        pending.extend(reversed(items))
    return found


def tensors_in(value: Any) -> list[Any]:
    """The tensors among `value`'s leaves, in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    return [leaf for leaf in leaves(value) if isinstance(leaf, torch.Tensor)]


#: Types that are never containers (most leaves are one of these: no further look).
_PLAIN: set[type] = {int, float, bool, str, bytes, complex, type(None), type(...)}
_nodes: dict[type, Any] | None = None  # torch's pytree registry, read when first needed


def _load() -> set[type]:
    global _nodes
    import torch
    from torch.utils import _pytree

    _PLAIN.update({torch.Tensor, torch.nn.Parameter, torch.dtype, torch.device})
    _nodes = _pytree.SUPPORTED_NODES
    return _PLAIN


def _items(value: Any) -> list[Any] | None:
    """The items of a dataclass instance or of a pytree-registered container, else None."""
    kind = type(value)
    if hasattr(kind, "__dataclass_fields__"):
        import dataclasses

        return [getattr(value, field.name) for field in dataclasses.fields(value)]
    node = _nodes.get(kind) if _nodes is not None else None
    return None if node is None else list(node.flatten_fn(value)[0])
