"""Declared surrogate gradients: `check-function --expect-grad [NAME=]EXPR`.

A straight-through estimator or a gradient-reversal layer has, on purpose, a backward that is
not the derivative of its forward (sign's derivative is 0; the STE passes grad_output through
where |x| <= 1). Finite differences can only call such a backward wrong. With --expect-grad
the user states the gradient it is meant to return, as an expression of gradcli's language in
which `grad_output` (the gradient arriving at the output; `grad_output_1` ... for further
outputs) and forward's inputs are variables; the check then compares backward's gradient for
that input, at a random grad_output, with the expression's value, and finite differences are
not used for that input (the result says so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from ...errors import UsageError
from .inputs import Inputs
from ..finite_differences.jacobian import leaves

#: Tolerances: both sides compute the same formula in float64.
RTOL, ATOL = 1e-7, 1e-10
#: Mismatching elements listed per input.
SHOWN = 5
_NAMED = re.compile(r"^\s*([A-Za-z_]\w*)\s*=(?!=)(.*)$", re.S)
_GRAD_OUTPUT = re.compile(r"^grad_output(_[1-9][0-9]*)?$")


@dataclass
class SurrogateCheck:
    """backward's gradient for one input against the declared expression."""

    name: str
    expression: str
    count: int = 0  # mismatching elements
    max_abs_err: float = 0.0
    shown: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.count == 0

    @property
    def label(self) -> str:
        return f"the declared gradient of {self.name}"

    def lines(self) -> list[tuple[str, bool]]:
        return [self.line()]

    def line(self) -> tuple[str, bool]:
        head = f"declared gradient [{self.name}] = {self.expression}: "
        if self.ok:
            return head + f"backward agrees (max abs err {self.max_abs_err:.3g})", False
        return head + f"backward differs at {self.count} element{'s' if self.count != 1 else ''}: " + "; ".join(self.shown), True

    def as_dict(self) -> dict[str, Any]:
        return {"input": self.name, "expression": self.expression, "ok": self.ok, "mismatches": self.count,
                "max_abs_err": self.max_abs_err, "shown": self.shown}


def declared_gradients(options: Sequence[str], inputs: Inputs, function: str,
                       library_dirs: Sequence[Any] = ()) -> dict[str, str]:
    """{input name: expression} from --expect-grad options: NAME=EXPR, or a bare EXPR when
    forward has exactly one floating tensor input. Each expression is parsed here, before any
    of the user's code runs, so that a mistake in it is a usage error of its own."""
    from ...pipeline import load

    floating = [n for n, v in zip(inputs.names, inputs.values)
                if isinstance(v, torch.Tensor) and v.is_floating_point()]
    declared: dict[str, str] = {}
    for option in options:
        match = _NAMED.match(option)
        if match and match[1] in inputs.names:
            name, expression = match[1], match[2].strip()
        elif match and not _GRAD_OUTPUT.match(match[1]):
            raise UsageError(f"--expect-grad {option}: {function}.forward has no input '{match[1]}'",
                             hint="its inputs are: " + ", ".join(inputs.names))
        elif len(floating) == 1:
            name, expression = floating[0], option.strip()
        else:
            raise UsageError(f"--expect-grad {option}: {function}.forward has {len(floating)} tensor inputs; "
                             "say whose gradient this is", hint=f"--expect-grad {floating[0] if floating else 'x'}=EXPR")
        if name not in floating:
            raise UsageError(f"--expect-grad {name}: '{name}' is not a floating tensor input, it has no gradient")
        if name in declared:
            raise UsageError(f"--expect-grad {name}: given twice")
        if not expression:
            raise UsageError(f"--expect-grad {option}: the expression is empty", hint="e.g. --expect-grad '-grad_output'")
        program, _ = load(expression, library_dirs)
        unknown = [v for v in program.variables if v not in inputs.names and not _GRAD_OUTPUT.match(v)]
        if unknown:
            raise UsageError(f"--expect-grad {name}: '{unknown[0]}' is neither grad_output nor an input of forward",
                             hint="the variables are grad_output (grad_output_1 ... for further outputs) and "
                                  + ", ".join(inputs.names))
        declared[name] = expression
    return declared


def check_declared(declared: dict[str, str], fn: Any, inputs: Inputs, seed: int,
                   library_dirs: Sequence[Any] = ()) -> list[SurrogateCheck]:
    """Each declared input's gradient from backward, at a random grad_output, against its expression."""
    from ...interpret.to_torch import build
    from ...pipeline import load

    tensors = {n: v.detach().to(torch.float64) for n, v in zip(inputs.names, inputs.values)
               if isinstance(v, torch.Tensor) and v.is_floating_point()}
    numbers = {n: float(v) for n, v in inputs.numbers().items() if isinstance(v, (int, float))}
    fresh = leaves(tensors)
    out = fn(fresh)
    outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,))
            if isinstance(o, torch.Tensor) and o.is_floating_point()]
    generator = torch.Generator().manual_seed(seed)
    grad_outputs = [torch.randn(o.shape, dtype=torch.float64, generator=generator).to(o.dtype) for o in outs]
    variables = {("grad_output" if k == 0 else f"grad_output_{k}"): g.to(torch.float64)
                 for k, g in enumerate(grad_outputs)}
    wanted = [fresh[n] for n in declared]
    got = torch.autograd.grad([o for o in outs if o.requires_grad],
                              wanted, [g for o, g in zip(outs, grad_outputs) if o.requires_grad], allow_unused=True)
    known = {**tensors, **numbers, **variables}
    checks = []
    for (name, expression), g in zip(declared.items(), got):
        program, library = load(expression, library_dirs)
        unknown = [v for v in program.variables if v not in known]
        if unknown:  # grad_output_3 of a Function with two outputs
            raise UsageError(f"--expect-grad {name}: '{unknown[0]}' is not a gradient of an output of forward",
                             hint="the variables are: " + ", ".join(known))
        with torch.no_grad():
            value = build(program, known, library=library).output
        expected = torch.as_tensor(value, dtype=torch.float64).expand(tensors[name].shape)
        actual = torch.zeros_like(tensors[name]) if g is None else g.detach().to(torch.float64)
        checks.append(_compare(name, expression, actual, expected, tensors[name]))
    return checks


def _compare(name: str, expression: str, got: torch.Tensor, expected: torch.Tensor, at: torch.Tensor) -> SurrogateCheck:
    diff = (got - expected).abs()
    bad = ~(diff <= ATOL + RTOL * expected.abs())
    check = SurrogateCheck(name, expression, int(bad.sum()),
                           float(diff.nan_to_num(nan=float("inf")).max()) if diff.numel() else 0.0)
    flat_at, flat_got, flat_expected = at.reshape(-1), got.reshape(-1), expected.reshape(-1)
    for j in bad.reshape(-1).nonzero().flatten().tolist()[:SHOWN]:
        check.shown.append(f"{name}[{j}] (= {flat_at[j].item():.6g}): declared {flat_expected[j].item():.6g}, "
                           f"backward {flat_got[j].item():.6g}")
    return check
