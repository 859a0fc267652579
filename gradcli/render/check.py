"""`gradcli check` and `check-function` for people: rich tables, then the verdict line.

Pure: a result in, text out (on the console `make_console` gives). JSON goes through
`print_json(result.as_dict())`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from .console import make_console, print_json

_WIDE = 100  # sympy's pretty print is used when it fits this width


def render_check(result: Any, *, as_json: bool) -> None:
    if as_json:
        print_json(result.as_dict())
        return
    console = make_console()
    _print_check(console, result)


def render_check_all(results: Sequence[Any], *, as_json: bool) -> None:
    if as_json:
        print_json({"ok": all(r.ok for r in results), "results": [r.as_dict() for r in results]})
        return
    from rich.table import Table

    console = make_console()
    table = Table(title=f"gradcli check --all (order {results[0].order if results else 1})", title_justify="left")
    for column in ("expression", "points", "max rel err", "gradcheck", "verdict"):
        table.add_column(column, no_wrap=column != "verdict")
    for r in results:
        compared = sum(c.points for c in r.variables)
        worst = max((c.max_rel_err for c in r.comparisons if math.isfinite(c.max_rel_err)), default=0.0)
        checks = [v for v in (r.gradcheck, r.gradgradcheck) if v is not None]
        passed = "passed" if all(v.ok for v in checks) else "FAILED" if any(v.ok is False for v in checks) else "not run"
        verdict = "ok" if r.ok else r.verdict()
        table.add_row(r.expression, f"{compared:,}", f"{worst:.2g}", passed, verdict, style=None if r.ok else "red")
    console.print(table)
    failed = [r for r in results if not r.ok]
    if failed:
        console.print(f"PROBLEM: {len(failed)} of {len(results)} library entries failed", style="bold red")
    else:
        console.print(f"OK: all {len(results)} library entries agree", style="bold green")


def _print_check(console: Any, result: Any) -> None:
    from rich.table import Table

    from ..verify.result import describe_gradcheck, describe_where

    console.print(f"check {result.expression}   ({result.dtype}, order {result.order}, {result.mode})", style="bold")
    console.print(f"points: {result.points_source}")
    for name, text in result.symbolic.items():
        _print_formula(console, f"d/d{name}", result.pretty.get(name), text)
    for name, text in result.symbolic_second.items():
        console.print(f"d2/d{name.replace(',', ' d')} = {text}")
    if result.symbolic_skipped:
        console.print(f"symbolic comparison skipped: {result.symbolic_skipped}", style="yellow")
    if result.comparisons:
        table = Table(title_justify="left", show_lines=False)
        notes = any(_notes(c) for c in result.comparisons)
        for column in ("derivative", "points", "max abs err", "max rel err", "worst at", "got", "exact", "skipped",
                       *(("notes",) if notes else ())):
            table.add_column(column, justify="right" if column == "points" else "left",
                             no_wrap=column in ("derivative", "points"))
        for c in result.comparisons:
            worst = dict(c.worst_at or {})
            got = worst.pop(c.candidate, "")
            exact = worst.pop("exact", "")
            where = ", ".join(f"{k}={_short(v)}" for k, v in worst.items())
            label = f"d/d{c.name}" if "," not in c.name else f"d2/d{c.name.replace(',', ' d')}"
            skipped = ", ".join(
                part for part in (
                    f"{c.skipped_outside_domain:,} outside domain" if c.skipped_outside_domain else "",
                    f"{c.kinks:,} kink{'s' if c.kinks != 1 else ''}" if c.kinks else "",
                ) if part
            )
            table.add_row(
                f"{label} {c.candidate}", f"{c.points:,}", _short(c.max_abs_err), _short(c.max_rel_err), where,
                _short(got), _short(exact), skipped or "0", *((_notes(c),) if notes else ()),
                style=None if c.ok else "red",
            )
        console.print(table)
        for c in result.comparisons:
            for k in c.kink_examples:
                point = ", ".join(f"{a}={_short(v)}" for a, v in k.items() if a != c.candidate)
                console.print(f"kink of d/d{c.name} at {point}: {c.candidate} gives {_short(k[c.candidate])} (not compared)")
            for r in c.wrong_ranges:
                console.print(
                    f"{c.name}: {c.candidate} gives {r['got']} for {describe_where(r['where'])}, exact {r['exact']} "
                    f"({r['points']:,} points)", style="red",
                )
    for label, verdict in (("gradcheck", result.gradcheck), ("gradgradcheck", result.gradgradcheck)):
        if verdict is not None:
            console.print(f"{label}: {describe_gradcheck(verdict)}", style="red" if verdict.ok is False else None)
    for note in result.notes:
        console.print(f"note: {note}")
    console.print(result.verdict(), style="bold green" if result.ok else "bold red", soft_wrap=True, markup=False)


def _print_formula(console: Any, label: str, pretty: str | None, text: str) -> None:
    lines = (pretty or "").splitlines()
    if pretty and len(lines) > 1 and len(lines) <= 12 and max(len(line) for line in lines) + len(label) + 3 <= _WIDE:
        middle = len(lines) // 2
        pad = " " * (len(label) + 3)
        for k, line in enumerate(lines):
            console.print(f"{label} = {line}" if k == middle else pad + line, markup=False)
    else:
        console.print(f"{label} = {text}", markup=False)


def _notes(c: Any) -> str:
    parts = []
    if c.beyond_range:
        parts.append(f"{c.beyond_range:,} beyond the dtype's range")
    if c.float64_formula_wrong:
        parts.append(f"{c.float64_formula_wrong:,} arbitrated for autograd")
    if c.wrong:
        parts.append(f"{c.wrong:,} WRONG")
    if c.not_arbitrated:
        parts.append(f"{c.not_arbitrated:,} not arbitrated")
    return "; ".join(parts)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
