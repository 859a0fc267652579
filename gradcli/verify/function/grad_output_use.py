"""How a Function's backward treats grad_output: read only, and in whatever layout it comes.

gradcheck hands backward a fresh, contiguous grad_output that nothing else holds, so two
faults pass it that real training meets at once:

- writing into grad_output (`grad.mul_(k)`): autograd may give the same tensor to another
  node too (an add passes its gradient to both of its inputs), whose gradient then silently
  changes, and the grad_output of `out.sum()` is one value expanded, which cannot be written
  (torch raises);
- assuming a layout: `.view(-1)` raises for the grad_output of `out.t() * w` (transposed), and
  code reading grad_output's memory as if contiguous gets the strided one of
  `stack([out, y], dim=1)` wrong.

Each is probed by calling the user's backward directly on the ctx (as verify/function/audit.py
does) with the same values in another layout, and with a grad_output it must leave as it was.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from .audit import Finding, apply_once, leaf_arguments
from .inputs import Inputs
from ..finite_differences.jacobian import ATOL, RTOL

#: Layout name -> (what it is, when autograd passes one).
LAYOUTS = {
    "transposed": ("non-contiguous (transposed)", "the output is transposed downstream (out.t() * w)"),
    "strided": ("non-contiguous (strided)", "the output is stacked downstream (stack([out, y], dim=1))"),
    "expanded": ("expanded (one value repeated in memory)", "the output is summed (out.sum())"),
}


def grad_output_findings(cls: type, inputs: Inputs, seed: int) -> list[Finding]:
    """Errors where backward writes into grad_output, raises for another layout of it, or
    returns another gradient for the same values in another layout; [] when forward or
    backward fails on the plain grad_output (the other checks report that)."""
    name = cls.__name__
    args, _ = leaf_arguments(inputs, needing=None)
    outs, node = apply_once(cls, args)
    if node is None:
        return []
    generator = torch.Generator().manual_seed(seed)
    # An output without gradient (ctx.mark_non_differentiable) gets zeros, as torch gives it.
    values = [(torch.rand(o.shape, generator=generator, dtype=torch.float64).to(o.dtype) + 0.5
               if o.requires_grad else torch.zeros_like(o)) if _floating(o) else None for o in outs]
    plain = [None if v is None else v.clone() for v in values]
    try:
        expected = _backward(cls, node, plain)
    except (Exception, SystemExit):
        return []
    if any(v is not None and not torch.equal(v, p) for v, p in zip(values, plain)):
        return [Finding("error", f"{name}.backward modifies grad_output in place: autograd may give the same "
                                 "tensor to another node (an add passes it to both inputs), whose gradient then "
                                 "changes, and the grad_output of out.sum() is expanded and cannot be written "
                                 "(torch raises): compute a new tensor (grad * k, not grad.mul_(k))")]
    for layout, make in _layouts(values).items():
        given = [None if v is None else make(v) for v in values]
        reference = expected if layout != "expanded" else _backward(cls, node, [
            None if g is None else g.contiguous() for g in given])
        what, when = LAYOUTS[layout]
        try:
            got = _backward(cls, node, given)
        except (Exception, SystemExit) as err:
            message = str(err).strip().splitlines()[0].rstrip(".") if str(err).strip() else ""
            return [Finding("error", f"{name}.backward raises for a {what} grad_output, which autograd passes when "
                                     f"{when}: {type(err).__name__}: {message}; use .reshape() rather than .view(), "
                                     "or grad_output.contiguous()")]
        differs = [n for n, a, b in zip(inputs.names, reference, got) if _differs(a, b)]
        if differs:
            return [Finding("error", f"{name}.backward returns another gradient for {', '.join(differs)} when "
                                     f"grad_output is {what}, as autograd passes it when {when}: the same values in "
                                     "another memory layout (it reads grad_output's memory as if it were "
                                     "contiguous)")]
    return []


def _floating(o: Any) -> bool:
    return isinstance(o, torch.Tensor) and o.is_floating_point()


def _backward(cls: type, node: Any, grads: Sequence[torch.Tensor | None]) -> tuple[Any, ...]:
    with torch.no_grad():
        returned = cls.backward(node, *grads)  # type: ignore[attr-defined]
    returned = tuple(returned) if isinstance(returned, (tuple, list)) else (returned,)
    return tuple(r.detach().clone() if isinstance(r, torch.Tensor) else r for r in returned)


def _layouts(values: Sequence[torch.Tensor | None]) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The layouts the outputs' shapes allow (a 1-element output has one layout)."""
    shapes = [v.shape for v in values if v is not None and v.numel() > 1]
    layouts: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}
    if any(len(s) >= 2 and s[-1] > 1 and s[-2] > 1 for s in shapes):
        layouts["transposed"] = lambda v: v.transpose(-1, -2).contiguous().transpose(-1, -2) if v.dim() >= 2 else v
    if shapes:
        layouts["strided"] = _strided
        layouts["expanded"] = lambda v: torch.ones((), dtype=v.dtype).expand(v.shape)
    return layouts


def _strided(v: torch.Tensor) -> torch.Tensor:
    """The same values, every element one apart in memory (a column of a stacked pair)."""
    if v.numel() <= 1:
        return v
    pair = torch.stack([v, torch.zeros_like(v)], dim=-1)
    return pair[..., 0]


def _differs(a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return (a is None) != (b is None)
    if a.shape != b.shape:
        return True
    both_nan = a.isnan() & b.isnan() if a.is_floating_point() else torch.zeros_like(a, dtype=torch.bool)
    return not bool((((a - b).abs() <= ATOL + RTOL * b.abs()) | both_nan).all())
