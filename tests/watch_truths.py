"""Truths the watch tests take from torch itself, shared by their files."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterable

import torch

#: The training script the watch tests run (examples/watch/train.py).
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "watch" / "train.py"


def load_example(name: str) -> ModuleType:
    """examples/watch/train.py imported as the module `name` (registered in sys.modules, so that
    the classes it defines can be pickled and found again, as in a bundle)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def first_nonfinite_backward(modules: Iterable[tuple[str, torch.nn.Module]],
                             loss_of: Callable[[], torch.Tensor]) -> tuple[str, str | None]:
    """torch's node hooks on one step: the first backward node that sends a nan or inf on, and
    the module whose forward made it (forward hooks on `modules`, named). `loss_of()` runs the
    forward and returns the loss."""
    made: dict[object, str] = {}
    hooks = [m.register_forward_hook(lambda m, i, o, name=name: made.setdefault(o.grad_fn, name) and None)
             for name, m in modules]
    loss = loss_of()
    for h in hooks:
        h.remove()
    nodes, pending, first = [], [loss.grad_fn], []
    while pending:
        node = pending.pop()
        if node is not None and node not in nodes:
            nodes.append(node)
            pending += [n for n, _ in node.next_functions]
    handles = [n.register_hook(lambda gi, go, n=n: first.append(n) if not first and any(
        g is not None and not bool(torch.isfinite(g).all()) for g in gi) else None) for n in nodes]
    loss.backward()
    for h in handles:
        h.remove()
    return first[0].name(), made.get(first[0])
