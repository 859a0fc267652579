"""The outcome of `check`: plain data and its JSON document (docs/json.md).

`CheckResult.ok` is what a user's own pytest suite relies on. The words a person reads are
render/check.py's alone: `gradcli.check` returns this result as an api.Check, whose `str()`
is that text, so a failing test shows what `gradcli check` prints:

    result = gradcli.check("x*sigmoid(x)")
    assert result.ok, result
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal

from ... import words
from ...outcome import Problem, Reported, sentence
from ...exact.compare import Comparison
from ...exact.problems import comparison_problems
from ..finite_differences.gradchecks import GradcheckVerdict
from ...exact.plan import CheckMode


@dataclass(frozen=True)
class FiniteDifferences:
    """One run of torch's finite-difference check: which one, and its verdict."""

    label: Literal["gradcheck", "gradgradcheck"]
    verdict: GradcheckVerdict


def finite_difference_checks(
    gradcheck: GradcheckVerdict | None, gradgradcheck: GradcheckVerdict | None
) -> Iterator[FiniteDifferences]:
    """gradcheck then gradgradcheck, each that was asked for (run or not)."""
    if gradcheck is not None:
        yield FiniteDifferences("gradcheck", gradcheck)
    if gradgradcheck is not None:
        yield FiniteDifferences("gradgradcheck", gradgradcheck)


@dataclass
class CheckResult(Reported):
    """Everything `gradcli check` found for one expression (outcome.py's protocol)."""

    expression: str
    order: int
    dtype: str
    mode: CheckMode
    points_source: str
    tolerances: dict[str, float]
    symbolic: dict[str, str] = field(default_factory=dict)  # d/dx as sympy prints it
    symbolic_second: dict[str, str] = field(default_factory=dict)  # "x,y" -> d2/dxdy
    pretty: dict[str, str] = field(default_factory=dict)  # sympy's pretty print, for terminals
    variables: list[Comparison] = field(default_factory=list)
    second: list[Comparison] = field(default_factory=list)
    published: list[Comparison] = field(default_factory=list)
    gradcheck: GradcheckVerdict = field(default_factory=lambda: GradcheckVerdict(None))
    gradgradcheck: GradcheckVerdict | None = None
    symbolic_skipped: str | None = None
    autograd_error: str | None = None
    notes: list[str] = field(default_factory=list)
    seed: int | None = None
    causes: list[Any] = field(default_factory=list)  # verify/causes/at_points.py's Cause, per group of points
    rewrites: list[Any] = field(default_factory=list)  # verify/expression/fixes.py's Rewrite, each rule tried
    fix: str | None = None  # every proven rewrite applied: passes the same check
    autograd_nonfinite: int = 0  # autograd values that are nan or inf, at compared or skipped points
    points: dict[str, Any] | None = field(default=None, repr=False)  # the values checked, for the proofs

    def tolerance(self) -> dict[str, float]:
        """atol and rtol, as compare() and the cause finders take them."""
        return {"atol": self.tolerances["atol"], "rtol": self.tolerances["rtol"]}

    @property
    def comparisons(self) -> list[Comparison]:
        return [*self.variables, *self.second, *self.published]

    @property
    def checks(self) -> list[FiniteDifferences]:
        """gradcheck (and gradgradcheck at order 2) as uniform records."""
        return list(finite_difference_checks(self.gradcheck, self.gradgradcheck))

    def unseen_causes(self) -> list[Any]:
        """Causes of non-finite gradients at points the comparisons set aside as undefined,
        where the 50-digit derivative is finite after all (so they are bugs too)."""
        seen = {c.name for c in self.comparisons if not c.ok}
        return [c for c in self.causes if c.is_bug and c.derivative not in seen]

    @property
    def problems(self) -> list[Problem]:
        """One record per problem found, most specific first (their sentences are at the end):
        autograd raised; a comparison's wrong ranges (or that it differs); a non-finite gradient
        where the 50-digit derivative is finite; a failed gradcheck."""
        found = []
        if self.autograd_error:
            found.append(Problem("autograd-raised", "", {"message": self.autograd_error}))
        for c in self.comparisons:
            found += comparison_problems(c)
        found += [Problem("unseen-cause", c.derivative, {"points": c.points, "where": c.where, "cause": c.kind})
                  for c in self.unseen_causes()]
        found += [Problem("finite-differences-failed", check.label, {"message": check.verdict.message})
                  for check in self.checks if check.verdict.ok is False]
        return found

    def agreed(self) -> list[str]:
        """What agreed, one phrase each (the OK verdict lists them)."""
        parts = []
        if self.variables:
            compared = sum(c.points for c in self.variables)
            worst = max(c.max_rel_err if math.isfinite(c.max_rel_err) else 0.0 for c in self.comparisons)
            parts.append(f"autograd agrees with the exact derivative ({words.plural(compared, 'value')}, "
                         f"max rel err {worst:.2g})")
        if self.second:
            parts.append("second derivatives agree")
        if self.published:
            parts.append("the published derivative agrees")
        parts += [f"{check.label} passed" for check in self.checks if check.verdict.ok]
        return parts

    def verdict(self) -> str:
        """The one-line verdict."""
        return words.overall(self.ok, words.problem_sentences(self.problems), self.agreed())

    def as_dict(self) -> dict[str, Any]:
        """The `check --json` document (docs/json.md): the first contract's keys, then the others."""
        data: dict[str, Any] = {
            "expression": self.expression,
            "ok": self.ok,
            "order": self.order,
            "symbolic": self.symbolic,
            "variables": [c.as_dict() for c in self.variables],
        }
        data.update({check.label: check.verdict.as_dict() for check in self.checks})
        data.update({
            "dtype": self.dtype,
            "mode": self.mode,
            "points_source": self.points_source,
            "tolerances": self.tolerances,
            "symbolic_second": self.symbolic_second,
            "second_derivatives": [c.as_dict() for c in self.second],
            "published": [c.as_dict() for c in self.published],
            "symbolic_skipped": self.symbolic_skipped,
            "autograd_error": self.autograd_error,
            "problems": words.problem_sentences(self.problems),
            "notes": self.notes,
            "seed": self.seed,
            "causes": [c.as_dict() for c in self.causes],
            "rewrites": [r.as_dict() for r in self.rewrites],
            "fix": self.fix,
            "autograd_nonfinite": self.autograd_nonfinite,
        })
        return data


@dataclass
class LibraryCheck(Reported):
    """`check --all`: one CheckResult per library entry (outcome.py's protocol)."""

    results: list[CheckResult]

    @property
    def problems(self) -> list[Problem]:
        return [Problem("entry-failed", r.expression, {"verdict": r.verdict()}) for r in self.results if not r.ok]

    @property
    def notes(self) -> list[str]:
        return []

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": words.problem_sentences(self.problems), "results": [r.as_dict() for r in self.results]}


@sentence("autograd-raised")
def _autograd_raised(p: Problem) -> str:
    return f"autograd raised: {p.detail['message']}"


@sentence("unseen-cause")
def _unseen_cause(p: Problem) -> str:
    d = p.detail
    return words.unseen_cause_problem(words.Fields(derivative=p.subject, points=d["points"], where=d["where"], kind=d["cause"]))


@sentence("finite-differences-failed")
def _finite_differences_failed(p: Problem) -> str:
    return f"{p.subject} failed: {p.detail['message']}"


@sentence("entry-failed")
def _entry_failed(p: Problem) -> str:
    return f"{p.subject}: {p.detail['verdict']}"
