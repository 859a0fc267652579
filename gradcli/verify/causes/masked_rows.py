"""A nan born in softmax over a fully masked row, and the -inf the user wrote themselves.

Padded attention fills masked scores with -inf (`scores.masked_fill(pad, float("-inf"))`). A
row whose every position is masked is then -inf throughout, and softmax of it is
exp(-inf - (-inf)) = 0/0 = nan in forward, which backward spreads to every parameter before it.
That is neither an overflow nor a nan the -inf "made": the -inf is a constant the user wrote
(an argument of the call that produced it, from finite tensors), and the first nan appears at
softmax, whose input row holds no finite value. This module tells those apart and tries the two
usual fixes on the user's own computation, each judged by its loss and gradients being finite:

- a finite fill: the written ±inf replaced by torch.finfo(dtype).min (max for +inf), so a
  fully masked row is uniform instead of 0/0;
- fully masked rows zeroed: their softmax input set to 0 and their output to 0 (zeroing only
  the output is enough after masked_fill, whose backward drops those rows' gradient, but not
  after an additive -inf mask, whose backward passes softmax's nan on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ...targets.nonfinite_calls import FILLS, SOFTMAX, MaskedRows, masked_rows, softmax_dim, written_nonfinite

__all__ = ["FILLS", "SOFTMAX", "MaskedRows", "masked_rows", "written_nonfinite", "why", "try_fixes", "fixes_sentence"]


def why(found: MaskedRows, where: str, fill: str | None) -> str:
    """The sentence: the nan's origin, the arithmetic, and whose the -inf is."""
    rows = f"{found.rows:,} of its {found.total:,} rows" if found.total > 1 else "its row"
    said = (f"the nan is born in {where}: {rows} {'are' if found.rows != 1 else 'is'} -inf at every position "
            "(every position masked), and softmax of such a row is exp(-inf - (-inf)) = 0/0 = nan")
    if fill is not None:
        said += f"; the -inf is your own constant, written by {fill}, not an overflow"
    return said


# -- the fixes, tried on the user's computation ---------------------------------------------------

#: Each fix: its name and what to write, in words the user can apply.
FIXES = (
    ("finite fill", "fill with torch.finfo(scores.dtype).min instead of float('-inf') (a fully masked row then "
                    "gets uniform weights, and no 0/0)"),
    ("zero masked rows", "zero the fully masked rows: where a row of softmax's input is -inf throughout, give "
                         "softmax 0 there and set its output row to 0"),
)


@dataclass(frozen=True)
class FixOutcome:
    name: str
    advice: str
    finite: bool  # the loss and every gradient were finite with it

    def as_dict(self) -> dict[str, Any]:
        return {"fix": self.name, "advice": self.advice, "finite": self.finite}


def try_fixes(finite_run: Callable[[], bool]) -> list[FixOutcome]:
    """Each fix applied to the user's whole computation (a torch-function mode around
    `finite_run()`, which runs forward and backward and says whether all came out finite)."""
    outcomes = []
    for (name, advice), mode in zip(FIXES, (_FiniteFill, _ZeroMaskedRows)):
        try:
            with mode():
                finite = bool(finite_run())
        except Exception:  # noqa: BLE001 - a fix the user's code cannot run with is no fix
            finite = False
        outcomes.append(FixOutcome(name, advice, finite))
    return outcomes


def fixes_sentence(outcomes: Sequence[FixOutcome]) -> str:
    said = [f"{o.advice}: {'checked on your model, loss and gradients finite' if o.finite else 'tried on your model, still not finite'}"
            for o in outcomes]
    return "fixes: " + "; or ".join(said)


class _FiniteFill(torch.overrides.TorchFunctionMode):
    """Every fill call's ±inf constant becomes the dtype's most negative (or positive) finite value."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in FILLS:
            tensor = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
            if tensor is not None:
                info = torch.finfo(tensor.dtype)
                args = tuple(_finite(a, info) for a in args)
                kwargs = {k: _finite(v, info) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def _finite(value: Any, info: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return float(info.min) if value < 0 else float(info.max)
    return value


class _ZeroMaskedRows(torch.overrides.TorchFunctionMode):
    """softmax of a row that is -inf throughout: 0 in, 0 out."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if name not in SOFTMAX or x is None or not x.is_floating_point():
            return func(*args, **kwargs)
        dim = softmax_dim(args, kwargs, x)
        empty = (x == -math.inf).all(dim=dim, keepdim=True)
        if not bool(empty.any()):
            return func(*args, **kwargs)
        out = func(x.masked_fill(empty, 0.0), *args[1:], **kwargs)
        return out.masked_fill(empty, 0.0)
