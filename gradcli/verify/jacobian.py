"""Jacobians of a user's Function, computed here so that a mismatch can be shown readably.

torch's gradcheck prints both Jacobians whole; a person wants "input x, element 3 (x=0.5):
expected 0.44, got 0.23". So the analytical Jacobian (your backward, one backward pass per
output element) and the numerical one (central differences in float64, two forward passes
per input element) are built here, up to JACOBIAN_MAX elements, and compared entry by
entry with gradcheck's own tolerances. The second-order check does the same for the
function x -> backward(ones) (your first-order gradient): finite differences of it against
autograd through it (double backward).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

#: Most input (and output) elements for which the Jacobians are built here.
JACOBIAN_MAX = 1000
#: gradcheck's default tolerances and step.
ATOL, RTOL, EPS = 1e-5, 1e-3, 1e-6
#: Mismatching entries listed per input.
SHOWN = 5

Fn = Callable[[dict[str, torch.Tensor]], torch.Tensor]


@dataclass
class Mismatch:
    input: str
    element: str  # "x[3]"
    output: str  # "out[3]"
    at: float  # the input element's value
    expected: float
    got: float

    def __str__(self) -> str:
        return (f"{self.element} (= {self.at:.6g}) -> {self.output}: expected {self.expected:.6g}, "
                f"got {self.got:.6g}")


@dataclass
class InputCheck:
    """One input's block of the Jacobian: your backward against the expected values."""

    name: str
    got: torch.Tensor  # (m, n)
    expected: torch.Tensor  # (m, n)
    mismatches: list[Mismatch] = field(default_factory=list)
    count: int = 0
    max_abs_err: float = 0.0

    @property
    def ok(self) -> bool:
        return self.count == 0

    def as_dict(self) -> dict[str, Any]:
        return {"input": self.name, "ok": self.ok, "mismatches": self.count, "max_abs_err": self.max_abs_err,
                "shown": [m.__dict__ for m in self.mismatches]}


def flat_output(fn: Fn, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    out = fn(tensors)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return torch.cat([torch.as_tensor(o).reshape(-1) for o in outs])


def analytical(fn: Fn, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """d out_i / d input_j through autograd (the user's backward), one pass per output element."""
    leaves = {n: t.detach().clone().requires_grad_(True) for n, t in tensors.items()}
    out = flat_output(fn, leaves)
    blocks = {n: torch.zeros(out.numel(), t.numel(), dtype=torch.float64) for n, t in leaves.items()}
    if not out.requires_grad:
        return blocks
    for i in range(out.numel()):
        grads = torch.autograd.grad(out[i], list(leaves.values()), retain_graph=True, allow_unused=True)
        for (name, _), g in zip(leaves.items(), grads):
            if g is not None:
                blocks[name][i] = g.detach().reshape(-1).to(torch.float64)
    return blocks


def numerical(fn: Fn, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Central differences, in float64."""
    base = {n: t.detach().clone() for n, t in tensors.items()}
    with torch.no_grad():
        m = flat_output(fn, base).numel()
        blocks = {}
        for name, t in base.items():
            block = torch.zeros(m, t.numel(), dtype=torch.float64)
            flat = t.view(-1)
            for j in range(t.numel()):
                keep = flat[j].item()
                flat[j] = keep + EPS
                plus = flat_output(fn, base).to(torch.float64)
                flat[j] = keep - EPS
                minus = flat_output(fn, base).to(torch.float64)
                flat[j] = keep
                block[:, j] = (plus - minus) / (2 * EPS)
            blocks[name] = block
    return blocks


def backward_of(fn: Fn) -> Fn:
    """x -> the gradient of sum(out) from the user's backward, kept differentiable."""

    def gradient(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        leaves = {n: (t if t.requires_grad else t.detach().clone().requires_grad_(True)) for n, t in tensors.items()}
        with torch.enable_grad():
            out = flat_output(fn, leaves)
            grads = torch.autograd.grad(out.sum(), list(leaves.values()), create_graph=True, allow_unused=True)
        return torch.cat([
            (g if g is not None else torch.zeros_like(t)).reshape(-1) for g, t in zip(grads, leaves.values())
        ])

    return gradient


def compare_blocks(
    got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], values: dict[str, torch.Tensor], output: str
) -> list[InputCheck]:
    """Entry-by-entry comparison with |got - expected| <= ATOL + RTOL*|expected|."""
    checks = []
    for name, g in got.items():
        e = expected[name]
        bad = ~((g - e).abs() <= ATOL + RTOL * e.abs())
        check = InputCheck(name, g, e, count=int(bad.sum()))
        diff = (g - e).abs()
        check.max_abs_err = float(diff.nan_to_num(nan=float("inf")).max()) if diff.numel() else 0.0
        flat_values = values[name].detach().reshape(-1)
        for i, j in bad.nonzero().tolist()[:SHOWN]:
            check.mismatches.append(Mismatch(
                name, _label(name, values[name].shape, j), _label(output, None, i),
                flat_values[j].item(), e[i, j].item(), g[i, j].item(),
            ))
        checks.append(check)
    return checks


def _label(name: str, shape: Any, index: int) -> str:
    if shape is not None and len(shape) == 0:
        return name
    if shape is None or len(shape) <= 1:
        return f"{name}[{index}]"
    idx = []
    for size in reversed(shape):
        idx.append(index % size)
        index //= size
    return f"{name}[{', '.join(map(str, reversed(idx)))}]"
