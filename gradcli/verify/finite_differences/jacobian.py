"""Jacobians of a user's Function, computed here so that a mismatch can be shown readably.

torch's gradcheck prints both Jacobians whole; a person wants "input x, element 3 (x=0.5):
expected 0.44, got 0.23". So the analytical Jacobian (your backward, one backward pass per
output element) and the numerical one (central differences in float64, two forward passes
per input element) are built here, up to JACOBIAN_MAX elements, and compared entry by
entry with gradcheck's own tolerances. The second-order check does the same for the
function x -> the gradient of sum(w * out) (your first-order gradient, with random output
weights w: sum(out) alone is constant for a normalising output, whose gradient is then 0
everywhere and tests nothing): finite differences of it against autograd through it
(double backward). Entries at a kink (`kinks.py`) are set apart, counted and not compared;
a block whose compared entries are all zero tested nothing, and says so (`tested_nothing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .arbiter import ATOL, EPS, RTOL  # gradcheck's default tolerances and step

#: Most input (and output) elements for which the Jacobians are built here.
JACOBIAN_MAX = 1000
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
    #: Entries at a kink (no derivative there, or one per side): set apart, not compared.
    apart: torch.Tensor | None = None
    kinks_shown: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.count == 0

    def wrong(self) -> torch.Tensor:
        """The compared entries that disagree (a mask over the block)."""
        bad = disagree(self.got, self.expected)
        return bad if self.apart is None else bad & ~self.apart

    @property
    def kinks(self) -> int:
        return 0 if self.apart is None else int(self.apart.sum())

    @property
    def tested_nothing(self) -> bool:
        """Every compared entry is zero on both sides (within ATOL): any backward returning
        zeros would have passed, so agreement here shows nothing."""
        compared = torch.ones_like(self.got, dtype=torch.bool) if self.apart is None else ~self.apart
        both = torch.stack([self.got[compared], self.expected[compared]])
        return bool((both.abs() <= ATOL).all())

    def as_dict(self) -> dict[str, Any]:
        return {"input": self.name, "ok": self.ok, "mismatches": self.count, "max_abs_err": self.max_abs_err,
                "shown": [m.__dict__ for m in self.mismatches], "kinks": self.kinks,
                "kinks_shown": [m.__dict__ for m in self.kinks_shown], "tested_nothing": self.tested_nothing}


def leaves(tensors: dict[str, torch.Tensor], *, keep_graph: bool = False) -> dict[str, torch.Tensor]:
    """A fresh leaf requiring grad per tensor, a clone (the caller's tensors stay as they are).
    With `keep_graph` a tensor that already requires grad is used as it is, so that a
    gradient computed from it can be differentiated again (double backward)."""
    return {n: t if keep_graph and t.requires_grad else t.detach().clone().requires_grad_(True)
            for n, t in tensors.items()}


def flat_output(fn: Fn, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    out = fn(tensors)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return torch.cat([torch.as_tensor(o).reshape(-1) for o in outs])


def analytical(fn: Fn, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """d out_i / d input_j through autograd (the user's backward), one pass per output element."""
    fresh = leaves(tensors)
    out = flat_output(fn, fresh)
    blocks = {n: torch.zeros(out.numel(), t.numel(), dtype=torch.float64) for n, t in fresh.items()}
    if not out.requires_grad:
        return blocks
    for i in range(out.numel()):
        grads = torch.autograd.grad(out[i], list(fresh.values()), retain_graph=True, allow_unused=True)
        for (name, _), g in zip(fresh.items(), grads):
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


def output_weights(count: int, seed: int) -> torch.Tensor:
    """`count` weights drawn uniformly from [0.5, 1.5) with `seed`: distinct and positive, so
    sum(w * out) moves whenever out does (sum(out) of a softmax is 1 whatever the input)."""
    generator = torch.Generator().manual_seed(seed)
    return 0.5 + torch.rand(count, generator=generator, dtype=torch.float64)


def backward_of(fn: Fn, weights: torch.Tensor | None = None) -> Fn:
    """x -> the gradient of sum(weights * out) (sum(out) without weights) from the user's
    backward, kept differentiable."""

    def gradient(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        fresh = leaves(tensors, keep_graph=True)
        with torch.enable_grad():
            out = flat_output(fn, fresh)
            total = out.sum() if weights is None else (out * weights.to(out.dtype)).sum()
            grads = torch.autograd.grad(total, list(fresh.values()), create_graph=True, allow_unused=True)
        return torch.cat([
            (g if g is not None else torch.zeros_like(t)).reshape(-1) for g, t in zip(grads, fresh.values())
        ])

    return gradient


def disagree(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Where |got - expected| > ATOL + RTOL*|expected| (gradcheck's test; nan disagrees)."""
    return ~((got - expected).abs() <= ATOL + RTOL * expected.abs())


def compare_blocks(
    got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], values: dict[str, torch.Tensor], output: str,
    apart: dict[str, torch.Tensor] | None = None,
) -> list[InputCheck]:
    """Entry-by-entry comparison with |got - expected| <= ATOL + RTOL*|expected|, except
    the entries `apart` marks (at a kink: counted, shown, not compared)."""
    checks = []
    for name, g in got.items():
        e = expected[name]
        kink = None if apart is None or name not in apart else apart[name]
        bad = disagree(g, e) if kink is None else disagree(g, e) & ~kink
        check = InputCheck(name, g, e, count=int(bad.sum()), apart=kink)
        diff = (g - e).abs() if kink is None else torch.where(kink, 0.0, (g - e).abs())
        check.max_abs_err = float(diff.nan_to_num(nan=float("inf")).max()) if diff.numel() else 0.0
        flat_values = values[name].detach().reshape(-1)

        def entry(i: int, j: int) -> Mismatch:
            return Mismatch(name, element_label(name, values[name].shape, j), element_label(output, None, i),
                            flat_values[j].item(), e[i, j].item(), g[i, j].item())

        check.mismatches = [entry(i, j) for i, j in bad.nonzero().tolist()[:SHOWN]]
        if kink is not None:
            check.kinks_shown = [entry(i, j) for i, j in kink.nonzero().tolist()[:SHOWN]]
        checks.append(check)
    return checks


def element_label(name: str, shape: Any, index: int) -> str:
    """'x[1, 2]' for flat index 5 of a (2, 3) tensor; 'x' for a scalar; 'out[5]' without a shape."""
    if shape is not None and len(shape) == 0:
        return name
    if shape is None or len(shape) <= 1:
        return f"{name}[{index}]"
    idx = []
    for size in reversed(shape):
        idx.append(index % size)
        index //= size
    return f"{name}[{', '.join(map(str, reversed(idx)))}]"
