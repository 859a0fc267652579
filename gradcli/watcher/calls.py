"""A model's top-level call within a training step: what watch keeps of it to replay it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..targets.flatten import tensors_in as output_tensors  # the one flattener of a model's output


@dataclass
class Call:
    """One top-level call of a model in the current step, enough to replay it."""

    module: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any] | None  # filled when the call returns (None while it runs)
    rng: torch.Tensor
    site: tuple[str, int] | None  # the user's line that called the model
    grads: list[torch.Tensor | None] = field(default_factory=list)  # arrived at each output in backward
    autocast: list[tuple[str, torch.dtype]] = field(default_factory=list)  # (device, dtype) in force at the call


def detached(value: Any) -> Any:
    """A call's arguments with every tensor detached, in the same containers (a namedtuple is
    rebuilt field by field), for a replay or a bundle."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, dict):
        return {k: detached(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        items = [detached(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


class buffers_restored:
    """The modules' buffers (BatchNorm's running statistics, step counters) put back as they
    were, when a replay or a rerun of the step has run them forward again. A buffer shared by
    several modules is kept once."""

    def __init__(self, modules: Any) -> None:
        self.saved = {id(b): (b, b.detach().clone()) for m in modules for b in m.buffers()}

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        with torch.no_grad():
            for buffer, saved in self.saved.values():
                buffer.copy_(saved)
