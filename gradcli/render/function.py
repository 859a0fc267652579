"""`gradcli check-function` for people: each check, the mismatches as sentences, the cause.

Pure: a FunctionResult in, text out.
"""

from __future__ import annotations

from typing import Any

from .console import make_console, print_json


def render_function(result: Any, *, as_json: bool) -> None:
    if as_json:
        print_json(result.as_dict())
        return
    console = make_console()
    console.print(f"check-function {result.function}   (order {result.order})", style="bold", markup=False)
    for name, value in zip(result.inputs.names, result.inputs.values):
        shown = [round(v, 6) for v in value.detach().reshape(-1).tolist()] if hasattr(value, "detach") else value
        origin = " (default)" if name in result.inputs.defaulted else ""
        console.print(f"{name} = {shown}{origin}", markup=False)
    if result.ref_forward is not None:
        style = None if result.ref_forward.ok else "red"
        console.print(f"forward vs {result.ref}: {result.ref_forward}", style=style, markup=False)
    for title, checks in result.sections():
        for c in checks:
            if c.ok:
                console.print(f"{title} [{c.name}]: ok (max abs err {c.max_abs_err:.3g})", markup=False)
                continue
            console.print(f"{title} [{c.name}]: {c.count} of {c.got.numel()} entries wrong", style="red", markup=False)
            for m in c.mismatches:
                console.print(f"    {m}", markup=False)
    for label, verdict in (("gradcheck", result.gradcheck), ("gradgradcheck", result.gradgradcheck)):
        if verdict is None:
            continue
        state = "passed" if verdict.ok else "not run" if verdict.ok is None else "FAILED"
        mode = "fast mode" if verdict.fast_mode else "slow mode"
        message = f": {verdict.message}" if verdict.message else ""
        console.print(f"{label} ({mode}): {state}{message}", style="red" if verdict.ok is False else None, markup=False)
    for cause in result.causes:
        console.print(f"likely cause: {cause}", style="yellow", markup=False)
    for note in result.notes:
        console.print(f"note: {note}", markup=False)
    console.print(result.verdict(), style="bold green" if result.ok else "bold red", markup=False, soft_wrap=True)
