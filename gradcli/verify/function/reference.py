"""`check-function --ref EXPR`: the Function against a reference expression.

The forward is compared with the expression's values (built with torch in float64), the
backward's Jacobian with sympy's exact Jacobian of the expression (one symbol per input
element, so any expression works, elementwise or not), and with order 2 the Jacobian of
the gradient of sum(w * out) (what double backward gives, with check-function's output
weights) with sympy's second derivatives.
Sizes are small here (a Function's test inputs), bounded by REF_MAX_ENTRIES.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from ...interpret.to_sympy import to_sympy
from ...interpret.to_torch import build
from ...errors import UsageError
from ...pipeline import load
from ..finite_differences.jacobian import InputCheck, compare_blocks
from ...exact.symbolic import SYMBOLIC_BUDGET, SymbolicTimeout, evaluate, tame, within
from .inputs import Inputs

#: Most Jacobian entries (outputs x input elements) derived symbolically.
REF_MAX_ENTRIES = 4096
#: Tolerances of the forward comparison.
RTOL, ATOL = 1e-7, 1e-10


@dataclass
class ForwardCheck:
    count: int
    max_abs_err: float
    shown: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.count == 0

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "mismatches": self.count, "max_abs_err": self.max_abs_err, "shown": self.shown}

    def __str__(self) -> str:
        if self.ok:
            return f"agrees (max abs err {self.max_abs_err:.3g})"
        return f"{self.count} values differ: " + "; ".join(self.shown)


def reference_checks(
    ref: str, inputs: Inputs, forward: torch.Tensor, got_first: dict[str, torch.Tensor] | None,
    got_second: dict[str, torch.Tensor] | None, library_dirs: Sequence[Any], *,
    weights: torch.Tensor | None = None, apart: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] = ({}, {}),
) -> tuple[ForwardCheck, list[InputCheck], list[InputCheck], list[str]]:
    """`weights`: the output weights of the second order (sum(weights * out)); `apart`: the
    entries at a kink of the reference (kinks.py), per order, not compared."""
    program, library = load(ref, library_dirs)
    tensors = {n: t.detach().to(torch.float64) for n, t in inputs.tensors().items()}
    numbers = {n: float(v) for n, v in inputs.numbers().items() if isinstance(v, (int, float))}
    unknown = [v for v in program.variables if v not in tensors and v not in numbers]
    if unknown:
        raise UsageError(
            f"--ref uses '{unknown[0]}', which is not an input of forward",
            hint="forward's inputs are: " + ", ".join(inputs.names),
        )
    with torch.no_grad():
        value = build(program, {**tensors, **numbers}, library=library).output
    # `forward` is the checked outputs flattened: the reference is compared element by element
    # in the same order (a 3x4 output with a 3x4 reference), or is one number for all of them.
    value = torch.as_tensor(value, dtype=torch.float64)
    if value.numel() not in (1, forward.numel()):
        raise UsageError(
            f"--ref {ref} has shape {list(value.shape)} ({value.numel():,} values), and the output of forward it is "
            f"compared with has {forward.numel():,} values", hint="give an expression of forward's inputs with the "
            "output's shape",
        )
    expected = value.reshape(-1).expand(forward.numel())
    forward_check = _forward(forward.reshape(-1).to(torch.float64), expected)
    notes: list[str] = []
    first: list[InputCheck] = []
    second: list[InputCheck] = []
    entries = forward.numel() * sum(t.numel() for t in tensors.values())
    if got_first is None or entries > REF_MAX_ENTRIES:
        notes.append("the reference's derivative is compared only on small inputs "
                     f"(up to {REF_MAX_ENTRIES:,} Jacobian entries)")
        return forward_check, first, second, notes
    try:
        jac1, jac2 = within(SYMBOLIC_BUDGET, _jacobians, program, library, tensors, numbers, got_second is not None,
                            weights)
    except SymbolicTimeout as err:
        notes.append(f"the reference's derivative was not compared: {err}")
        return forward_check, first, second, notes
    if any(jac1[n].shape != got_first[n].shape for n in jac1):
        notes.append("the reference's output has another shape than forward's: derivatives not compared")
        return forward_check, first, second, notes
    first = compare_blocks(got_first, jac1, tensors, "out", apart[0] or None)
    if got_second is not None and jac2 is not None:
        second = compare_blocks(got_second, jac2, tensors, "grad", apart[1] or None)
    return forward_check, first, second, notes


def _forward(got: torch.Tensor, expected: torch.Tensor) -> ForwardCheck:
    """Values differ beyond the tolerances; nan against nan and an infinity against the same
    infinity are the same value (the Function and the reference agree there)."""
    diff = (got - expected).abs()
    same = (torch.isnan(got) & torch.isnan(expected)) | (torch.isinf(got) & (got == expected))
    bad = ~(diff <= ATOL + RTOL * expected.abs()) & ~same
    diff = torch.where(same, 0.0, diff)
    shown = [f"out[{i}]: reference {expected[i].item():.6g}, forward {got[i].item():.6g}"
             for i in bad.nonzero().flatten().tolist()[:5]]
    return ForwardCheck(int(bad.sum()), float(diff.nan_to_num(nan=float("inf")).max()) if diff.numel() else 0.0, shown)


def _jacobians(
    program: Any, library: Any, tensors: dict[str, torch.Tensor], numbers: dict[str, float], second: bool,
    weights: torch.Tensor | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
    import sympy

    flat, symbols, env = symbolic_outputs(program, library, tensors, numbers)

    def matrix(rows: list[Any], cols: list[Any]) -> torch.Tensor:
        values = [[float(evaluate(tame(sympy.diff(r, c)), env, 1)[0]) for c in cols] for r in rows]
        return torch.tensor(values, dtype=torch.float64).reshape(len(rows), len(cols))

    jac1 = {name: matrix(flat, syms) for name, syms in symbols.items()}
    if not second:
        return jac1, None
    gradient = weighted_gradient(flat, symbols, weights)
    return jac1, {name: matrix(gradient, syms) for name, syms in symbols.items()}


def symbolic_outputs(
    program: Any, library: Any, tensors: dict[str, torch.Tensor], numbers: dict[str, float],
) -> tuple[list[Any], dict[str, list[Any]], dict[Any, Any]]:
    """The reference's outputs, flat, as sympy expressions of one real symbol per input
    element (`x_0`, `x_1` ...); those symbols by input; and the value of each symbol."""
    import sympy

    symbols, arrays, env = {}, {}, {}
    for name, t in tensors.items():
        syms = [sympy.Symbol(f"{name}_{k}", real=True) for k in range(t.numel())]
        array = np.empty(len(syms), dtype=object)
        array[:] = syms
        arrays[name] = array.reshape(tuple(t.shape)) if t.dim() else array.reshape(())
        symbols[name] = syms
        env.update({s: v for s, v in zip(syms, t.reshape(-1).to(torch.float64))})
    out = np.asarray(to_sympy(program, {**arrays, **numbers}, library=library), dtype=object)
    return [sympy.sympify(v) for v in out.reshape(-1)], symbols, env


def weighted_gradient(flat: list[Any], symbols: dict[str, list[Any]], weights: torch.Tensor | None) -> list[Any]:
    """d sum(w * out) / d each input element, inputs in order (w = 1 without weights)."""
    import sympy

    total = sympy.Add(*flat) if weights is None else sympy.Add(*(sympy.Float(w) * y for w, y in zip(weights.tolist(), flat)))
    return [sympy.diff(total, s) for syms in symbols.values() for s in syms]
