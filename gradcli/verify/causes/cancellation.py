"""Cancellation in a computation's gradient, at node level: finite, and wrong in its last digits.

A model whose loss and gradients are all finite can still get a gradient that lost most of
its digits: (exp(h) - 1)/h near h = 0 subtracts two numbers near 1 in forward, and in
backward the gradient arriving at h is the sum of two parts near ±1/h that cancel to about
1/2. Nothing is nan, so --flow's non-finite search sees nothing. The evidence is in the
recorded graph (graph/evidence.py):

1. a node where gradient parts meet (one value used twice) and their sum is CANCELLED_SHARE
   of the dtype's digits or more smaller than the largest part, at some element;
2. the exact gradient arriving there (exact/replay.py: the downstream replayed in sympy,
   evaluated with mpmath at 50 digits) differs from autograd's by more than the dtype's
   tolerance: that is the claim, and nothing is claimed without it;
3. the forward subtraction that cancels (its value much smaller than its terms), which is the
   node and source line named: the line to rewrite (expm1, 2*sin(h/2)**2, ...).

The relative error is shown element by element, ordered by how much the parts cancel: it
grows as the elements approach the spot where they cancel completely.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .cause import Cause
from ...exact.evaluation import TOLERANCES
from .nodes import NodeReasoning

#: A node is examined when its gradient parts cancel by this share of the dtype's digits.
CANCELLED_SHARE = 0.25
#: Elements listed with their relative error, from the least to the most cancelled.
ELEMENTS_SHOWN = 4
#: Most candidate nodes replayed, and seconds each replay may take (sympy grows with the
#: downstream's size; past the budget the replay is stopped and nothing is claimed).
MAX_CANDIDATES, REPLAY_BUDGET = 3, 5.0


def find_cancellation(evidence: Any, source: str = "") -> Cause | None:
    """The cancellation cause of an all-finite computation, or None when no gradient is shown
    (by its exact value) to be wrong."""
    from ...exact.replay import exact_gradient

    from ...exact.symbolic import SymbolicTimeout, within

    reasoning = NodeReasoning(evidence, None, source)
    for cancelled, node, parts in _meeting_points(evidence)[:MAX_CANDIDATES]:
        got = node.arriving.detach().to(torch.float64)
        try:
            exact = within(REPLAY_BUDGET, exact_gradient, evidence, node)
        except SymbolicTimeout:
            continue
        if exact is None:
            continue
        rtol, atol = TOLERANCES.get(str(node.arriving.dtype).removeprefix("torch."), TOLERANCES["float64"])
        error = (got - exact).abs()
        wrong = error > atol + rtol * exact.abs()
        if not bool(wrong.any()):
            continue
        return _cause(reasoning, evidence, node, parts, cancelled, got, exact, wrong)
    return None


def _meeting_points(evidence: Any) -> list[tuple[torch.Tensor, Any, list[tuple[Any, torch.Tensor]]]]:
    """Nodes whose arriving gradient is a sum of parts that cancel, most cancelled first."""
    from ...exact.replay import MAX_ELEMENTS

    found = []
    for node in [*evidence.leaf_nodes(), *evidence.nodes]:
        if node.output is None or node.arriving is None or len(node.consumers) < 2:
            continue
        if node.output.numel() > MAX_ELEMENTS:  # no exact value would back a claim there
            continue
        dtype = node.arriving.dtype
        if not dtype.is_floating_point:
            continue
        digits = -math.log10(torch.finfo(dtype).eps)
        parts = [(c, c.leaving[i]) for c, i in node.consumers if i < len(c.leaving) and c.leaving[i] is not None]
        parts = [(c, p.to(torch.float64)) for c, p in parts if p.shape == node.arriving.shape]
        if len(parts) < 2:
            continue
        largest = torch.stack([p.abs() for _, p in parts]).max(dim=0).values
        total = node.arriving.to(torch.float64).abs()
        cancelled = torch.log10(largest / total.clamp_min(1e-300)).where(largest > 0, torch.zeros_like(largest))
        # The parts cancel in backward, or a subtraction after the node cancelled in forward
        # ((1 - cos(h))/h**2 in float32: 1 - cos(h) is exactly 0, one part 0, nothing left to cancel).
        if float(cancelled.max()) >= CANCELLED_SHARE * digits or _cancelling_subtraction(evidence, node, None) is not None:
            found.append((cancelled, node, parts))
    return sorted(found, key=lambda item: -float(item[0].max()))


def _cause(reasoning: NodeReasoning, evidence: Any, node: Any, parts: list[tuple[Any, torch.Tensor]],
           cancelled: torch.Tensor, got: torch.Tensor, exact: torch.Tensor, wrong: torch.Tensor) -> Cause:
    dtype = node.arriving.dtype
    digits = -math.log10(torch.finfo(dtype).eps)
    relative = ((got - exact).abs() / exact.abs().clamp_min(1e-300)).reshape(-1)
    # How close each element is to the spot: how far its parts exceed the exact sum (autograd's
    # own sum is the inaccurate value, so it does not measure that).
    largest = torch.stack([p.abs() for _, p in parts]).max(dim=0).values.reshape(-1)
    cancelled = torch.log10(largest / exact.abs().reshape(-1).clamp_min(1e-300))
    order = cancelled.argsort()
    values = node.output.detach().to(torch.float64).reshape(-1)
    worst = int(relative.argmax())
    lost = min(digits, max(0.0, digits + math.log10(max(float(relative[worst]), 1e-300))))
    shown = [int(order[round(k * (order.numel() - 1) / max(1, ELEMENTS_SHOWN - 1))])
             for k in range(min(ELEMENTS_SHOWN, order.numel()))]
    shown = list(dict.fromkeys(shown))
    name = reasoning._name(node)
    subtraction = _cancelling_subtraction(evidence, node, worst)
    where = f"{reasoning._name(subtraction)} subtracts nearly equal terms in forward, and in backward " \
        if subtraction is not None else ""
    summary = (
        f"finite but inaccurate: {where}the gradient arriving at {name} is the sum of "
        + " and ".join(f"{_fmt(float(p.reshape(-1)[worst]))} from {c.name}" for c, p in parts)
        + f", which cancel to {_fmt(float(exact.reshape(-1)[worst]))} ({float(cancelled[worst]):.0f} digits) at "
        f"{_fmt(float(values[worst]))}; the relative error grows as the elements approach the spot where the parts "
        "cancel: "
        + ", ".join(f"{float(relative[i]):.1g} at {_fmt(float(values[i]))}" for i in shown)
        + f"; {lost:.0f} of {digits:.0f} {str(dtype).removeprefix('torch.')} digits lost (exact "
        f"{_fmt(float(exact.reshape(-1)[worst]))} with 50 digits, autograd {_fmt(float(got.reshape(-1)[worst]))})"
    )
    at = subtraction if subtraction is not None else node
    factors = [{"node": c.name, "source": reasoning.text(c), "value": _fmt(float(p.reshape(-1)[worst])),
                "role": "gradient sent"} for c, p in parts]
    cause = Cause("cancellation", "", int(wrong.sum()), {}, summary, node=at.name, source=reasoning.text(at),
                  factors=factors)
    shape = tuple(node.output.shape)
    cause.examples = [{"element": _label(i, shape), "value": float(values[i]), "autograd": float(got.reshape(-1)[i]),
                       "exact": float(exact.reshape(-1)[i]), "relative_error": float(relative[i])} for i in shown]
    return cause


def _cancelling_subtraction(evidence: Any, start: Any, element: int | None) -> Any:
    """The add/sub after `start` whose value is smallest against its terms (at `element`, or
    at any element): the forward cancellation (exp(h) - 1 near h = 0), or None when none loses
    CANCELLED_SHARE of the dtype's digits."""
    best, best_lost = None, None
    after = evidence.nodes[evidence.nodes.index(start) + 1:] if start in evidence.nodes else evidence.nodes
    for node in after:
        if node.call not in ("add", "sub", "rsub") or node.output is None:
            continue
        out = node.output.detach().to(torch.float64).abs()
        terms = [torch.as_tensor(i, dtype=torch.float64).abs() for i in node.inputs[:2]
                 if isinstance(i, (torch.Tensor, int, float)) and not isinstance(i, bool)]
        if len(terms) < 2:
            continue
        try:
            largest = torch.maximum(*torch.broadcast_tensors(terms[0], terms[1])).expand_as(out)
        except RuntimeError:
            continue
        lost = torch.log10(largest / out.clamp_min(1e-300)).where(largest > 0, torch.zeros_like(out))
        if element is not None and lost.numel() == start.output.numel():
            value = float(lost.reshape(-1)[element])
        else:
            value = float(lost.max())
        enough = CANCELLED_SHARE * -math.log10(torch.finfo(node.output.dtype).eps)
        if value >= enough and (best_lost is None or value > best_lost):
            best, best_lost = node, value
    return best


def _label(index: int, shape: tuple[int, ...]) -> str:
    """A flat index as the node value's element, `[3, 0]`."""
    found = []
    for size in reversed(shape):
        index, rest = divmod(index, size)
        found.append(rest)
    return "[" + ", ".join(map(str, reversed(found))) + "]"


def _fmt(value: float) -> str:
    return f"{value:.6g}"
