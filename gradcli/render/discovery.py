"""`gradcli check-function mypkg` (or a model target) for people: one line per Function.

A DiscoveryResult in, `Line`s out (contract.py). Each Function's line is name, verdict and a
short reason, never wrapped (soft_wrap), so that a CI log can be grepped for WRONG or COULD
NOT RUN; the full report of one Function is `gradcli check-function NAME` alone, or --json.
"""

from __future__ import annotations

from typing import Any

from .contract import Line

#: How each status is shown: problems in capitals, as grads shows its flags.
SHOWN = {"ok": "ok", "wrong": "WRONG", "not tested": "NOT TESTED", "could not run": "COULD NOT RUN"}
STYLE = {"ok": None, "wrong": "red", "not tested": "red", "could not run": "red"}


def discovery_lines(result: Any) -> list[Line]:
    what = ("the custom Functions its forward applied, each checked at the arguments of its first call"
            if result.kind == "model" else "every torch.autograd.Function defined there")
    out = [Line(f"check-function {result.target}   ({result.found}; order {result.order}, seed {result.seed})",
                style="bold", soft_wrap=True),
           Line(f"{what}:", soft_wrap=True)]
    width = max((len(entry.name) for entry in result.entries), default=0)
    label = max(len(SHOWN[entry.status]) for entry in result.entries) if result.entries else 0
    for entry in result.entries:
        calls = f" (applied {entry.calls:,} times)" if entry.calls and entry.calls > 1 else ""
        reason = entry.reason.splitlines()[0] if entry.reason else ""
        out.append(Line(f"  {SHOWN[entry.status]:<{label}}  {entry.name:<{width}}  {reason}{calls}",
                        style=STYLE[entry.status], soft_wrap=True))
    out += [Line(f"  could not import {m.name}: {m.reason.splitlines()[0]}", style="red", soft_wrap=True)
            for m in result.unimportable]
    out += [Line(f"  skipped {s.name}: {s.reason}", soft_wrap=True) for s in result.skipped]
    out += [Line(f"note: {note}", soft_wrap=True) for note in result.notes]
    out.append(Line(result.verdict(), style="bold green" if result.ok else "bold red", soft_wrap=True))
    return out
