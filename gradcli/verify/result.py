"""The outcome of `check`: plain data, its JSON document (docs/json.md) and a readable text.

`CheckResult.ok` and `str(result)` are what a user's own pytest suite relies on:

    result = gradcli.check("x*sigmoid(x)")
    assert result.ok, result
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .compare import Comparison
from .gradchecks import GradcheckVerdict
from .plan import CheckMode


@dataclass
class CheckResult:
    """Everything `gradcli check` found for one expression."""

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

    @property
    def comparisons(self) -> list[Comparison]:
        return [*self.variables, *self.second, *self.published]

    @property
    def ok(self) -> bool:
        checks = [self.gradcheck, self.gradgradcheck]
        return (
            self.autograd_error is None
            and all(c.ok for c in self.comparisons)
            and all(v is None or v.ok is not False for v in checks)
        )

    def problems(self) -> list[str]:
        """One sentence per problem found, most specific first."""
        found = []
        if self.autograd_error:
            found.append(f"autograd raised: {self.autograd_error}")
        for c in self.comparisons:
            if c.ok:
                continue
            who = "autograd" if c.candidate == "autograd" else "the library's published derivative"
            what = f"d/d{c.name}" if "," not in c.name else f"d2/d{c.name.replace(',', ' d')}"
            for r in c.wrong_ranges:
                found.append(
                    f"{who} gives {r['got']} for {describe_where(r['where'])} where the true {what} "
                    f"is {r['exact']} ({r['points']:,} point{'s' if r['points'] != 1 else ''})"
                )
            if c.not_arbitrated:
                found.append(
                    f"{c.arbitrated:,} of the {c.disagreeing:,} disagreeing points of {what} were "
                    "arbitrated at 50 digits (evenly spaced); the ranges are from those"
                )
        for label, verdict in (("gradcheck", self.gradcheck), ("gradgradcheck", self.gradgradcheck)):
            if verdict is not None and verdict.ok is False:
                found.append(f"{label} failed: {verdict.message}")
        return found

    def verdict(self) -> str:
        """The one-line verdict."""
        if not self.ok:
            problems = self.problems()
            return "PROBLEM: " + problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
        compared = sum(c.points for c in self.variables)
        parts = []
        if self.variables:
            worst = max(c.max_rel_err if isinstance(c.max_rel_err, float) else 0.0 for c in self.comparisons)
            parts.append(f"autograd agrees with the exact derivative ({compared:,} values, max rel err {worst:.2g})")
        if self.second:
            parts.append("second derivatives agree")
        if self.published:
            parts.append("the published derivative agrees")
        for label, verdict in (("gradcheck", self.gradcheck), ("gradgradcheck", self.gradgradcheck)):
            if verdict is not None and verdict.ok:
                parts.append(f"{label} passed")
        return "OK: " + ("; ".join(parts) if parts else "nothing disagreed")

    def as_dict(self) -> dict[str, Any]:
        """The `check --json` document (docs/json.md): the first contract's keys, then the others."""
        data: dict[str, Any] = {
            "expression": self.expression,
            "ok": self.ok,
            "order": self.order,
            "symbolic": self.symbolic,
            "variables": [c.as_dict() for c in self.variables],
            "gradcheck": self.gradcheck.as_dict(),
        }
        if self.gradgradcheck is not None:
            data["gradgradcheck"] = self.gradgradcheck.as_dict()
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
            "problems": self.problems(),
            "notes": self.notes,
            "seed": self.seed,
        })
        return data

    def __str__(self) -> str:
        lines = [f"check {self.expression} ({self.dtype}, order {self.order}): {'ok' if self.ok else 'PROBLEM'}"]
        lines.append(f"  points: {self.points_source}")
        for name, text in self.symbolic.items():
            lines.append(f"  d/d{name} = {text}")
        for name, text in self.symbolic_second.items():
            lines.append(f"  d2/d{name.replace(',', ' d')} = {text}")
        if self.symbolic_skipped:
            lines.append(f"  symbolic comparison skipped: {self.symbolic_skipped}")
        for c in self.comparisons:
            lines.append("  " + describe_comparison(c))
        for label, verdict in (("gradcheck", self.gradcheck), ("gradgradcheck", self.gradgradcheck)):
            if verdict is not None:
                lines.append(f"  {label}: {describe_gradcheck(verdict)}")
        lines.extend(f"  note: {note}" for note in self.notes)
        lines.extend(f"  problem: {p}" for p in self.problems())
        lines.append(self.verdict())
        return "\n".join(lines)


def describe_where(where: dict[str, Any]) -> str:
    if "at" in where:
        first, last = where["at"]
        a, b = first.get("element", first), last.get("element", last)
        return str(a) if a == b else f"{a} to {b}"
    parts = []
    for name, (low, high) in where.items():
        parts.append(f"{name} = {low:.6g}" if low == high else f"{name} from {low:.6g} to {high:.6g}")
    return ", ".join(parts)


def describe_comparison(c: Comparison) -> str:
    label = f"{c.name} ({c.candidate})"
    text = (
        f"{label}: {c.points:,} compared, max abs err {_num(c.max_abs_err)}, max rel err {_num(c.max_rel_err)}"
    )
    extras = []
    if c.skipped_outside_domain:
        extras.append(f"{c.skipped_outside_domain:,} outside the domain")
    if c.kinks:
        extras.append(f"{c.kinks:,} at kinks")
    if c.beyond_range:
        extras.append(f"{c.beyond_range:,} beyond the dtype's range")
    if c.float64_formula_wrong:
        extras.append(f"{c.float64_formula_wrong:,} where only the float64 formula was off")
    if c.wrong:
        extras.append(f"{c.wrong:,} WRONG")
    return text + (f" ({'; '.join(extras)})" if extras else "")


def describe_gradcheck(verdict: GradcheckVerdict) -> str:
    if verdict.ok is None:
        return f"not run ({verdict.message})"
    mode = "fast mode" if verdict.fast_mode else "slow mode"
    if verdict.ok:
        return f"passed ({mode}, {verdict.points:,} input elements)"
    return f"FAILED ({mode}): {verdict.message}"


def _num(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
