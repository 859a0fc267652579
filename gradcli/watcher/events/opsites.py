"""The lines that made the first step's loss: which user line called softmax, sigmoid or a loss
function, keyed by the backward node its result carries.

A finding on the loss (detectors/loss_input.py) is read from the first step's graph, where a
node knows its operation but not the line that called it. While the first step runs (until the
first optimizer step is applied), a `TorchFunctionMode` sees every torch function the run calls;
for the few named in WATCHED it notes the caller's user line against the result's `grad_fn`.
Every other call passes straight through. After the first step the mode is gone: later steps
pay nothing.

XXX: a torch.compile'd model: dynamo would trace the mode into its graph and compile again once
the mode is gone, so the mode steps aside when a compiled module is called (its ops are in one
compiled node anyway).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

#: The functions whose calls are noted (by __name__: torch.softmax, F.softmax and Tensor.softmax alike).
WATCHED = frozenset({
    "softmax", "log_softmax", "sigmoid", "cross_entropy", "nll_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
})

Site = tuple[str, int]


class LineNotes(TorchFunctionMode):
    """A mode that notes user lines for a while: `start()` enters it, `stop()` leaves the mode
    stack (only if it is on top: another mode entered since is the user's, left in place)."""

    def __init__(self, user_site: Callable[[Any], Site | None]) -> None:
        super().__init__()
        self.user_site = user_site
        self.active = False

    def start(self) -> "LineNotes":
        self.__enter__()
        self.active = True
        return self

    def stop(self) -> None:
        if self.active and torch.overrides._get_current_function_mode() is self:
            self.__exit__(None, None, None)
            self.active = False


class OpSites(LineNotes):
    """`sites`: grad_fn node -> (function name, user line, the shapes of its tensor arguments)."""

    def __init__(self, user_site: Callable[[Any], Site | None]) -> None:
        super().__init__(user_site)
        self.sites: dict[Any, tuple[str, Site | None, list[list[int]]]] = {}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name not in WATCHED:
            return func(*args, **(kwargs or {}))
        site = self.user_site(sys._getframe(1))
        # torch's own warnings (mse_loss's "Using a target size ...") would name this frame as
        # their line: they are caught and issued again from the user's frame (where torch's own
        # would point, so Python's once-per-line filter sees one warning, not two)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = func(*args, **(kwargs or {}))
        for w in caught:
            warnings.warn(w.message, w.category, stacklevel=_depth_to(site) if site else 2)
        if isinstance(result, torch.Tensor) and result.grad_fn is not None:
            shapes = [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
            self.sites.setdefault(result.grad_fn, (name, site, shapes))
        return result


def _depth_to(site: Site) -> int:
    """warnings.warn's stacklevel that names the frame at `site` (from the caller of _depth_to)."""
    frame, depth = sys._getframe(2), 2
    while frame is not None and (frame.f_code.co_filename, frame.f_lineno) != site:
        frame, depth = frame.f_back, depth + 1
    return depth if frame is not None else 2
