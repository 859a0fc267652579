"""How memory runs the user's forward and loss again (the watched run, the create_graph run,
checkpoint.py's timed and trial runs), each time from the same random state and under the
same autocast."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from ..targets.model import scalar_loss

LossFn = Callable[[Any], Any]


class Run:
    """How to run the user's forward and loss again, from the same random state each time."""

    def __init__(self, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: LossFn,
                 amp: str | None, device: Any) -> None:
        self.model, self.args, self.kwargs, self.loss_fn, self.amp, self.device = model, args, kwargs, loss_fn, amp, device
        self.rng = torch.random.get_rng_state()
        self.output: Any = None

    def forward_context(self) -> Any:
        """Autocast when --amp asks for it, and the random state the first run started from."""
        torch.random.set_rng_state(self.rng)
        if self.amp is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=getattr(torch, self.amp))

    def forward(self) -> Any:
        self.output = self.model(*self.args, **self.kwargs)
        return self.output

    def loss(self) -> Any:
        """A whole forward and loss (under the forward context)."""
        with self.forward_context():
            return scalar_loss(self.loss_fn(self.forward()))

    def forget(self) -> None:
        self.output = None
