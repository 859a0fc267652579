"""`gradcli check-function` for people: each check, the mismatches as sentences, the cause.

A FunctionResult in, `Line`s out (contract.py), the words from gradcli.words. This is the
one description of a check-function result: the CLI prints these lines, and the Python API's
result (`gradcli.check_function`, api.FunctionCheck) is their plain text (plain.py).
"""

from __future__ import annotations

from typing import Any

from .. import words
from .contract import Line


def function_lines(result: Any) -> list[Line]:
    out = [Line(f"check-function {result.function}   (order {result.order}, seed {result.inputs.seed})", style="bold")]
    for name, value in zip(result.inputs.names, result.inputs.values):
        origin = " (default)" if name in result.inputs.defaulted else ""
        out += [Line(line) for line in words.input_lines(name, value, origin)]
    out += [Line(str(o)) for o in result.outputs if len(result.outputs) > 1 or not o.checked]
    if result.ref_forward is not None:
        out.append(Line(f"forward vs {result.ref}: {result.ref_forward}", style=None if result.ref_forward.ok else "red"))
    for title, checks in result.sections():
        for c in checks:
            out.append(Line(words.input_check_line(title, c), style=None if c.ok else "red"))
            out += [Line(f"    {m}") for m in c.mismatches]
            out += [Line(f"    {words.kink_entry(m)}") for m in c.kinks_shown]
    for check in result.checks:
        out.append(Line(f"{check.label}: {words.describe_gradcheck(check.verdict)}",
                        style="red" if check.verdict.ok is False else None))
    out += [Line(text, style="red" if bad else None) for part in result.parts() for text, bad in part.lines()]
    out += [Line(f"likely cause: {cause.summary}", style="yellow") for cause in result.causes]
    out += [Line(f"seen: {seen}", style="yellow") for seen in result.seen]
    out += [Line(f"note: {note}") for note in result.notes]
    plain = result.ok and not result.untested
    out.append(Line(result.verdict(), style="bold green" if plain else "bold yellow" if result.ok else "bold red",
                    soft_wrap=True))
    return out
