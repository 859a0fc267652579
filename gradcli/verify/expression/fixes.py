"""Prove a rewrite before proposing it: the same check, on the same points, before and after.

For every rule of language/rewrites.py that matches the expression, the rewritten text is
checked again with the same values, dtype, order and seed. It is shown as a fix only when it
computes the same function (finite wherever the original is, and equal to the original's
exact 50-digit values at sampled points)
and the check then finds no wrong point (or, for a derivative that is really undefined
somewhere, when autograd is finite at more points and still right everywhere else).
Otherwise the cause says "no known rewrite". `fix` is every proven rule applied together,
checked once more: the expression `check --fix` prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from ...language.rewrites import matching, rewrite_program
from ...language.source import program_source


@dataclass
class Rewrite:
    """One rule tried on the expression, with the check's outcome before and after."""

    rule: str
    expression: str  # the rewritten text, as checked
    precondition: str
    tradeoff: str | None
    wrong_before: int
    wrong_after: int
    nonfinite_before: int
    nonfinite_after: int
    points: int
    same_function: bool
    proven: bool

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def propose(result: Any, program: Any, library: Any, rerun: Any) -> None:
    """Try every matching rule; record them on `result` (rewrites, fix) and attach the proven
    ones to the causes they remove. `rerun(text)` is the same check on another expression."""
    tried: list[Rewrite] = []
    for rule in matching(program):
        rewritten = rewrite_program(program, rule)
        text = program_source(rewritten)
        after = rerun(text)
        same = same_function(program, rewritten, library, result.points)
        tried.append(_outcome(rule, text, result, after, same))
    result.rewrites = tried
    proven = [r for r in tried if r.proven]
    if proven:
        combined = program
        from ...language.rewrites import RULES_BY_NAME

        for r in proven:
            combined = rewrite_program(combined, RULES_BY_NAME[r.rule])
        text = program_source(combined)
        after = rerun(text) if len(proven) > 1 else None
        if after is None or (after.ok and same_function(program, combined, library, result.points)):
            result.fix = text
        else:
            result.fix = proven[0].expression
    for cause in result.causes:
        match = next((r for r in proven if _removes(r, cause)), None)
        cause.rewrite = match.as_dict() if match else None


def _removes(rewrite: Rewrite, cause: Any) -> bool:
    if cause.kind == "undefined":
        return rewrite.wrong_before == 0 and rewrite.nonfinite_after < rewrite.nonfinite_before
    return rewrite.wrong_after == 0


def _outcome(rule: Any, text: str, before: Any, after: Any, same: bool) -> Rewrite:
    # Points check set aside as undefined whose 50-digit derivative is finite count as wrong too.
    wrong_before = max(sum(c.wrong for c in before.comparisons), sum(c.points for c in before.causes if c.is_bug))
    wrong_after = sum(c.wrong for c in after.comparisons)
    points = max((c.points for c in after.variables), default=0)
    fixes = after.ok and wrong_after == 0 and (
        wrong_before > 0 or not before.ok or after.autograd_nonfinite < before.autograd_nonfinite
    )
    return Rewrite(rule.name, text, rule.precondition, rule.tradeoff, wrong_before, wrong_after,
                   before.autograd_nonfinite, after.autograd_nonfinite, points, same, fixes and same)


def same_function(original: Any, rewritten: Any, library: Any, points: Mapping[str, torch.Tensor] | None) -> bool:
    """Whether the two programs compute the same function: finite wherever the original is,
    and equal (rtol 1e-6) to the original's exact values (its float64 values when it has no
    elementwise exact form)."""
    from ...interpret.to_torch import build

    if not points:
        return False
    with torch.no_grad():
        values = {n: v.to(torch.float64) for n, v in points.items()}
        try:
            a = build(original, values, library=library).output
            b = build(rewritten, values, library=library).output
        except Exception:  # noqa: BLE001 - a rewrite torch refuses is simply not the same function
            return False
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    if a.shape != b.shape:
        return False
    finite = torch.isfinite(a)
    if not bool(torch.isfinite(b[finite]).all()):
        return False
    truth = _exact_values(original, library, points)
    if truth is not None:
        # The original may itself be inaccurate (that is often the problem: x + sqrt(x**2 + 1)
        # cancels), so the rewrite is held to the original's exact (50-digit) values instead.
        index, values = truth
        got = b.reshape(-1)[index] if b.numel() > 1 else b.reshape(1).expand(index.numel())
        return bool(((got - values).abs() <= 1e-12 + 1e-6 * values.abs()).all())
    return bool(((a[finite] - b[finite]).abs() <= 1e-12 + 1e-6 * a[finite].abs()).all())


#: Points at which a rewrite's values are compared with the original's exact values.
EXACT_SAMPLE = 25


def _exact_values(program: Any, library: Any, points: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The original elementwise function's 50-digit values at up to EXACT_SAMPLE points
    (where finite), or None for a program that is not elementwise."""
    from ...interpret.to_sympy import to_sympy
    from ...exact.arbitrate import UNDEFINED, exact_function, sample
    from ...exact.plan import make_plan
    from ...exact.symbolic import real_symbols

    plan = make_plan(program, library)
    if plan.mode != "elementwise" or any(v.dim() != 1 for v in points.values()):
        return None
    names = list(plan.body.variables)
    symbols = real_symbols(names)
    try:
        fn = exact_function(to_sympy(plan.body, symbols, library=library), [symbols[n] for n in names])
    except Exception:  # noqa: BLE001 - no exact form: fall back to comparing with torch
        return None
    size = next(iter(points.values())).numel()
    chosen = sample(list(range(size)), EXACT_SAMPLE)
    kept, values = [], []
    for i in chosen:
        value = fn(*(float(points[n][i]) for n in names))
        if value is not UNDEFINED and math.isfinite(value):
            kept.append(i)
            values.append(value)
    return torch.tensor(kept, dtype=torch.long), torch.tensor(values, dtype=torch.float64)
