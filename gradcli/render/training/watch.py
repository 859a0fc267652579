"""`gradcli watch` for people: the stop (the step, what was non-finite, the origin with its
line, the cause, how it was found), then the findings by step, as plain fixed-width text.

Renderer contract: a WatchResult in, lines out; also `str()` of the Python API's result.
Every word about a watched run is chosen here.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .memory import table

if TYPE_CHECKING:
    from ...watcher.result import Stop, WatchResult

_STOP_WORDS = {"nonfinite_loss": "the loss is not finite", "nonfinite_gradient": "a gradient is not finite",
               "scaler_skips": "GradScaler skipped step after step: the float16 gradients kept overflowing",
               "spike": "a spike (--stop-on spike)"}
_FINDING_WORDS = {"loss_spike": "loss spike", "grad_spike": "gradient-norm spike",
                  "layer_spike": "layer gradient-norm spike", "adam_ratio": "g² far above Adam's v", "no_gradient": "no gradient",
                  "dead": "all-zero gradient (dead)", "vanishing": "vanishing", "exploding": "exploding"}


def watch_lines(result: "WatchResult") -> list[str]:
    what = result.script or "the run"
    lines: list[str] = []
    if result.stop is not None:
        lines += _stop_lines(what, result)
    else:
        end = "finished" if result.finished else "ended"
        skipped = f", {result.skipped} skipped by GradScaler" if result.skipped else ""
        lines.append(f"{what}: {end}; {result.steps} optimizer step(s) applied{skipped}, {result.checks} checked, "
                     f"{'no finding' if not result.findings else _count(len(result.findings), 'finding')}")
    if result.findings:
        lines += ["", "findings (each reported at the first step it was seen):"]
        rows = [[str(f.step), _FINDING_WORDS.get(f.kind, f.kind), f.optimizer, f.module or "-", _names(f.parameters),
                 _numbers(f.detail)] for f in result.findings]
        lines += table(["step", "finding", "optimizer", "module", "parameters", "numbers"], rows, {0})
    lines += [f"note: {note}" for note in result.notes]
    return lines


def _stop_lines(what: str, result: "WatchResult") -> list[str]:
    stop: Stop = result.stop  # type: ignore[assignment]
    lines = [f"{what}: stopped at step {stop.step} of {stop.optimizer}, before it was applied "
             f"({stop.step - 1 - result.skipped + (stop.kind == 'scaler_skips')} step(s) of it applied"
             + (f", {result.skipped} skipped by GradScaler" if result.skipped else "") + f"; {result.checks} checked in all)",
             f"  {_STOP_WORDS[stop.kind]}" + (f" (loss {stop.loss:g})" if stop.loss is not None else "")
             + (f" on rank(s) {', '.join(map(str, stop.ranks))}" if stop.ranks else "")]
    if stop.parameters and stop.kind == "spike":  # a layer's warning (precursors.py): finite, but out of line
        lines.append(f"  in layer {stop.module or 'the model'}: {_names(stop.parameters, 6)}")
    elif stop.parameters:
        lines.append(f"  non-finite gradients: {_names(stop.parameters, 6)}"
                     + (f" (first in module {stop.module})" if stop.module else ""))
    origin = stop.origin
    if origin is not None:
        if origin.module and origin.module_class:
            where = f"{origin.module_class} ({origin.module})"
        elif origin.module_class or origin.module:
            where = origin.module_class or origin.module or ""
        else:
            what = stop.replay.what if stop.replay is not None else None  # a trainer's own loss code
            where = (f"{what}, outside the model's modules" if what else "the loss, outside the model") \
                if origin.phase in ("forward", "backward") else "the model"
        lines.append(f"  origin: {origin.phase}" + (f", {origin.node}" if origin.node else "") + f", in {where}")
        if origin.file:
            lines.append(f"    {os.path.basename(origin.file)}:{origin.line}" + (f"  {origin.code}" if origin.code else ""))
    if stop.cause is not None:
        lines.append(f"  cause: {stop.cause.kind}: {stop.cause.summary}")
    if stop.scale is not None:
        lines.append(f"  GradScaler's scale: {stop.scale:g}" + (f"; a scale of {stop.fits:g} would fit" if stop.fits else ""))
    replay = stop.replay
    if replay is not None:
        if replay.how == "replayed":
            what = f"'s {replay.what}" if replay.what else ""  # a trainer's own loss code, run again
            how = f"  found by replaying step {stop.step}{what} in process ({replay.seconds:.2f} s)"
        elif replay.how == "inspected":
            read = "batch" if stop.cause is not None and stop.cause.kind == "nonfinite_input" else "weights"
            how = f"  found in the step's {read}, without running the step again ({replay.seconds:.2f} s)"
        elif replay.how == "reran":
            how = f"  found by rerunning the script to step {stop.step} ({replay.steps} step(s) again, {replay.seconds:.1f} s)"
        else:
            how = "  not replayed"
        if replay.why_not and stop.origin is None:
            how += f"; {replay.why_not}"
        lines.append(how)
    return lines


def _names(names: list[str], limit: int = 4) -> str:
    if not names:
        return "-"
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _numbers(detail: dict) -> str:
    if "value" in detail:
        return f"{detail['value']:.4g} vs median {detail['median']:.4g} (z {detail['z']})"
    if "ratio" in detail:
        return f"Σg² = {detail['ratio']:g} x Σv̂"
    return ""


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
