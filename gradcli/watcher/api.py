"""`gradcli.watch(model, optimizer, **options)`: the watch around a loop written in Python.

    with gradcli.watch(model, optimizer) as w:
        for x, y in batches:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()          # raises gradcli.WatchStop before a non-finite update
    print(w.result)
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .options import WatchOptions
from .session import Listener, Watch


def watch(*targets: Any, listener: Listener | None = None, **options: Any) -> Watch:
    """A `Watch` over the given models and optimizers (none: every optimizer that steps, and
    the models found by their calls). Options are WatchOptions' fields."""
    import torch

    models = [t for t in targets if isinstance(t, torch.nn.Module)]
    optimizers = [t for t in targets if isinstance(t, torch.optim.Optimizer)]
    other = [t for t in targets if not isinstance(t, (torch.nn.Module, torch.optim.Optimizer))]
    if other:
        raise UsageError(f"gradcli.watch takes models and optimizers, not {type(other[0]).__name__}")
    try:
        chosen = WatchOptions(**options)
    except TypeError as err:
        raise UsageError(f"gradcli.watch: {err}") from None
    return Watch(chosen, models=models, optimizers=optimizers, listener=listener)
