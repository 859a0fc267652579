"""The third truth: finite differences, through torch.autograd.gradcheck and gradgradcheck.

Always in float64. Slow mode (the full Jacobian, 2n+2 evaluations for n input elements)
up to SLOW_MODE_MAX_ELEMENTS input elements; past that, fast mode (a random projection of
the Jacobian, a constant few evaluations). At most GRADCHECK_MAX_POINTS points (evenly
spaced) go into an elementwise gradcheck: finite differences on 10^7 points add nothing the
symbolic comparison on all of them does not already show.

When fast mode fails, torch recomputes both Jacobians in slow mode just to print them: a
dense n x n matrix (800 MB for the identity on 10,000 points, far more within the limits).
That fallback is replaced here by a one-line message (`_no_dense_fallback`), so the memory
of a check stays linear in its inputs. Where finite differences and autograd disagree is
found element by element elsewhere (`verify/finite_differences/arbiter.py`), without any Jacobian.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

#: Up to this many input elements gradcheck builds the full Jacobian (slow mode).
SLOW_MODE_MAX_ELEMENTS = 300
#: Most points handed to an elementwise gradcheck.
GRADCHECK_MAX_POINTS = 100_000


@dataclass
class GradcheckVerdict:
    """torch's verdict, with its first line when it failed.

    Where finite differences disagreed with autograd but the exact derivative sided with
    autograd (`settle.py`), those points are counted in `unreliable_points`, per reason in
    `unreliable_reasons`, and are not held against autograd."""

    ok: bool | None  # None: not run (message says why)
    fast_mode: bool = False
    message: str | None = None
    points: int = 0
    unreliable_points: int = 0
    unreliable_reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "fast_mode": self.fast_mode, "message": self.message, "points": self.points,
                "unreliable_points": self.unreliable_points, "unreliable_reasons": dict(self.unreliable_reasons)}


def run_gradcheck(
    fn: Callable[..., Any], inputs: Sequence[torch.Tensor], *, seed: int, second: bool = False, **flags: bool
) -> GradcheckVerdict:
    """gradcheck (or gradgradcheck with `second`) of `fn` at float64 `inputs`.

    gradgradcheck draws its random output gradients from torch's global generator (fast
    mode's projections come from a generator of gradcheck's own): here that generator is
    seeded with `seed` inside a fork of its state, so a second-order check is reproducible
    with its --seed and the caller's random stream is left as it was.
    """
    from torch.autograd import gradcheck, gradgradcheck
    from torch.autograd.gradcheck import GradcheckError

    size = sum(t.numel() for t in inputs)
    fast = size > SLOW_MODE_MAX_ELEMENTS
    inputs = tuple(t.detach().to(torch.float64).requires_grad_(True) for t in inputs)
    check = gradgradcheck if second else gradcheck
    try:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]), _no_dense_fallback():
            warnings.simplefilter("ignore")
            torch.manual_seed(seed)
            check(fn, inputs, fast_mode=fast, **flags)
    except GradcheckError as err:
        return GradcheckVerdict(False, fast, _first_line(err), size)
    except RuntimeError as err:
        return GradcheckVerdict(False, fast, f"autograd raised: {_first_line(err)}", size)
    return GradcheckVerdict(True, fast, None, size)


#: What replaces torch's slow-mode reprint of the Jacobians after a fast-mode failure.
FAST_MODE_NOTE = "(fast mode: the dense Jacobians were not recomputed)"


@contextlib.contextmanager
def _no_dense_fallback() -> Iterator[None]:
    """Within: a failing fast-mode gradcheck raises at once, without torch's slow-mode
    recomputation of both full Jacobians (`_run_slow_mode_and_get_error`, private to torch
    2.x; if it is ever renamed, nothing is patched and torch's own behaviour returns)."""
    import importlib

    module = importlib.import_module("torch.autograd.gradcheck")  # the module, not the function

    original = getattr(module, "_run_slow_mode_and_get_error", None)
    if original is None:
        yield
        return
    module._run_slow_mode_and_get_error = lambda *args, **kwargs: " " + FAST_MODE_NOTE
    try:
        yield
    finally:
        module._run_slow_mode_and_get_error = original


def spaced(count: int, limit: int = GRADCHECK_MAX_POINTS) -> torch.Tensor:
    """At most `limit` indices out of range(count), evenly spaced."""
    if count <= limit:
        return torch.arange(count)
    # float64: in the default float32, count - 1 rounds up past 2**24 and indexes out of range
    return torch.linspace(0, count - 1, limit, dtype=torch.float64).round().long().unique()


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line.rstrip(",").strip()
