"""`gradcli check` for people: the derivatives, a table of the comparisons, then the verdict.

A result in, `Line`s out (contract.py), the words from gradcli.words. This is the one
description of a check result: the CLI prints these lines, and the Python API's result
(`gradcli.check`, api.Check) is their plain text (plain.py).
"""

from __future__ import annotations

import math
from typing import Any

from .. import words
from .contract import Line

_WIDE = 100  # sympy's pretty print is used when it fits this width


def check_lines(result: Any) -> list[Line]:
    from rich.table import Table

    # The seed picks more than random points (the 50-digit sample, gradgradcheck's output
    # gradients): it is shown even when every value came from --var.
    seed = "" if result.seed is None or "seed" in result.points_source else f"; seed {result.seed}"
    out = [Line(f"check {result.expression}   ({result.dtype}, order {result.order}, {result.mode})", style="bold"),
           Line(f"points: {result.points_source}{seed}")]
    for name, text in result.symbolic.items():
        out += _formula(words.derivative_label(name), result.pretty.get(name), text)
    for name, text in result.symbolic_second.items():
        out.append(Line(f"{words.derivative_label(name)} = {text}"))
    if result.symbolic_skipped:
        out.append(Line(f"symbolic comparison skipped: {result.symbolic_skipped}", style="yellow"))
    if result.comparisons:
        table = Table(title_justify="left", show_lines=False)
        notes = any(words.comparison_notes(c) for c in result.comparisons)
        for column in ("derivative", "points", "max abs err", "max rel err", "worst at", "got", "exact", "skipped",
                       *(("notes",) if notes else ())):
            table.add_column(column, justify="right" if column == "points" else "left",
                             no_wrap=column in ("derivative", "points"))
        for c in result.comparisons:
            worst = dict(c.worst_at or {})
            got = worst.pop(c.candidate, "")
            exact = worst.pop("exact", "")
            where = ", ".join(f"{k}={_short(v)}" for k, v in worst.items())
            table.add_row(
                f"{words.derivative_label(c.name)} {c.candidate}", f"{c.points:,}", _short(c.max_abs_err),
                _short(c.max_rel_err), where, _short(got), _short(exact),
                ", ".join(words.comparison_skipped(c)) or "0",
                *(("; ".join(words.comparison_notes(c)),) if notes else ()),
                style=None if c.ok else "red",
            )
        out.append(Line(table))
        for c in result.comparisons:
            for k in c.kink_examples:
                point = ", ".join(f"{a}={_short(v)}" for a, v in k.items() if a != c.candidate)
                out.append(Line(f"kink of {words.derivative_label(c.name)} at {point}: {c.candidate} gives {_short(k[c.candidate])} "
                                "(not compared)"))
            out += [Line(words.wrong_range_line(c, r), style="red") for r in c.wrong_ranges]
    for check in result.checks:
        out.append(Line(f"{check.label}: {words.describe_gradcheck(check.verdict)}",
                        style="red" if check.verdict.ok is False else None))
    out += [Line(f"note: {note}") for note in result.notes]
    for cause in result.causes:
        out += [Line(text, style="red" if cause.is_bug and k == 0 else None)
                for k, text in enumerate(words.cause_lines(cause))]
    if result.fix:
        out.append(Line(f"fix: {result.fix}", style="bold", soft_wrap=True))  # kept whole: it is pasted
    out.append(Line(result.verdict(), style="bold green" if result.ok else "bold red", soft_wrap=True))
    return out


def library_check_lines(suite: Any) -> list[Line]:
    """`check --all`: one table row per library entry, then the count that failed."""
    from rich.table import Table

    results = suite.results
    seed = f", seed {results[0].seed}" if results else ""
    table = Table(title=f"gradcli check --all (order {results[0].order if results else 1}{seed})", title_justify="left")
    for column in ("expression", "points", "max rel err", "gradcheck", "verdict"):
        table.add_column(column, no_wrap=column != "verdict")
    for r in results:
        compared = sum(c.points for c in r.variables)
        worst = _worst(c.max_rel_err for c in r.comparisons)
        states = {words.gradcheck_state(check.verdict) for check in r.checks}
        passed = "passed" if states <= {"passed"} else "FAILED" if "FAILED" in states else "not run"
        verdict = "ok" if r.ok else r.verdict()
        table.add_row(r.expression, f"{compared:,}", f"{worst:.2g}", passed, verdict, style=None if r.ok else "red")
    failed = [r for r in results if not r.ok]
    if failed:
        last = Line(f"PROBLEM: {len(failed)} of {len(results)} library entries failed", style="bold red")
    else:
        last = Line(f"OK: all {len(results)} library entries agree", style="bold green")
    return [Line(table), last]


def _worst(errors: Any) -> float:
    """The largest error; nan when any is nan (a row must not say 0 beside a nan gradient)."""
    errors = list(errors)
    if any(math.isnan(e) for e in errors):
        return math.nan
    return max(errors, default=0.0)


def _formula(label: str, pretty: str | None, text: str) -> list[Line]:
    lines = (pretty or "").splitlines()
    if pretty and len(lines) > 1 and len(lines) <= 12 and max(len(line) for line in lines) + len(label) + 3 <= _WIDE:
        middle = len(lines) // 2
        pad = " " * (len(label) + 3)
        return [Line(f"{label} = {line}" if k == middle else pad + line) for k, line in enumerate(lines)]
    return [Line(f"{label} = {text}")]


def _short(value: Any) -> str:
    return words.number(value, 4)
