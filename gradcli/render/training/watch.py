"""`gradcli watch` for people: the stop (the step, what was non-finite, the origin with its
line, the cause, how it was found), then the findings by step, as plain fixed-width text.

Renderer contract: a WatchResult in, lines out; also `str()` of the Python API's result.
Every word about a watched run is chosen here.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING


from ...watcher.kinds import WORDS

if TYPE_CHECKING:
    from ...watcher.result import Stop, WatchFinding, WatchResult

_STOP_WORDS = {"nonfinite_loss": "the loss is not finite", "nonfinite_gradient": "a gradient is not finite",
               "scaler_skips": "GradScaler skipped step after step: the float16 gradients kept overflowing",
               "spike": "a spike (--stop-on spike)"}


def watch_lines(result: "WatchResult") -> list[str]:
    what = result.script or "the run"
    lines: list[str] = []
    if result.stop is not None:
        lines += stop_lines(what, result)
    else:
        end = "finished" if result.finished else "ended"
        skipped = f", {result.skipped} skipped by GradScaler" if result.skipped else ""
        findings = [f for f in result.findings if not f.warning]
        warnings = len(result.findings) - len(findings)
        lines.append(f"{what}: {end}; {result.steps} optimizer step(s) applied{skipped}, {result.checks} checked, "
                     f"{_count(len(findings), 'finding') if findings else 'no finding'}"
                     + (f", {_count(warnings, 'warning')}" if warnings else ""))
    for heading, chosen in (("findings (each reported at the first step it was seen):", False),
                            ("warnings (worth a look; healthy runs show them too, so they do not fail the run):", True)):
        shown = [f for f in result.findings if f.warning == chosen]
        if shown:
            lines += ["", heading]
            for group in _by_step_layer_spikes(shown):
                lines += _finding_lines(group[0]) if len(group) == 1 else _layer_spikes_lines(group)
    lines += [f"note: {note}" for note in result.notes]
    return lines


def stop_lines(what: str, result: "WatchResult") -> list[str]:
    """The stop, as watch words it: also diverge's words for a run watch stops (render/training/diverge.py)."""
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
    lines += _rows_lines(stop.rows)
    return lines


def _finding_lines(f: "WatchFinding") -> list[str]:
    """One finding: the step, what, on what; the numbers from torch; the line; the fix."""
    words = WORDS[f.kind]
    on = _names(f.parameters) if f.parameters else _names(f.modules) if f.modules else ""
    head = f"  step {f.step}  {words.label}" + (f" ({f.optimizer})" if f.optimizer else "") + (f": {on}" if on else "")
    lines = [head]
    evidence = _evidence(f)
    if evidence:
        lines.append(f"    {evidence}")
    lines += _rows_lines(f.detail.get("rows"), "    ")
    if f.file is not None:
        code = f.code
        lines.append(f"    {os.path.basename(f.file)}:{f.line}" + (f"  {code}" if code else ""))
    if not words.warning:
        lines.append(f"    fix: {words.fix}")
    return lines


def _by_step_layer_spikes(findings: list["WatchFinding"]) -> list[list["WatchFinding"]]:
    """The findings in their order, one list each, except that the layer spikes of one step of
    one optimizer make one list: a spike that reaches every layer of a ResNet is one event."""
    groups: list[list["WatchFinding"]] = []
    at: dict[tuple[int, str | None], list["WatchFinding"]] = {}
    for f in findings:
        if f.kind != "layer_spike":
            groups.append([f])
            continue
        key = (f.step, f.optimizer)
        if key not in at:
            at[key] = []
            groups.append(at[key])
        at[key].append(f)
    return groups


def _layer_spikes_lines(group: list["WatchFinding"]) -> list[str]:
    """Several layers' spikes at one step: the layers, the largest first, and the largest's numbers."""
    first = group[0]
    ordered = sorted(group, key=lambda f: f.detail["value"] / f.detail["median"], reverse=True)
    layers = [f.detail.get("layer") or "the model" for f in ordered]
    top = ordered[0]
    return [f"  step {first.step}  {WORDS[first.kind].label}" + (f" ({first.optimizer})" if first.optimizer else "")
            + f" in {len(group)} layers: {_names(layers)}",
            f"    the largest, {layers[0]}: {_numbers(top.detail)}"]


def _evidence(f: "WatchFinding") -> str:
    """The numbers behind a finding, in a sentence."""
    d = f.detail
    if f.kind == "carried_gradients":
        if "times" not in d:
            return f"backward added onto the gradients the previous step used, on {_count(d['parameters_carried'], 'parameter')}"
        return (f"backward added onto the gradients the previous step used: the step's gradient norm is "
                f"{d['times']:.3g}x what this step's backward gave ({d['step_grad_norm']:.4g} vs "
                f"{d['backward_grad_norm']:.4g}), on {_count(d['parameters_carried'], 'parameter')}")
    if f.kind == "no_optimizer":
        outside = d.get("outside_parameters")
        return (f"{_count(d['parameters_unheld'], 'parameter')} ({d['elements']:,} elements) get gradients and no "
                f"optimizer holds them" + (f"; {outside} of them in no module's parameters(): kept in a plain Python list, which model.parameters() does not see"
                                           if outside else ""))
    if f.kind == "zeroed_before_step":
        return (f"backward reached {_count(d['parameters_reached'], 'parameter')}; at step() their gradients were "
                f"{d['gradients_at_step']}")
    if f.kind == "activation_twice":
        return (f"{d['activation']} output fed to {d['loss']}, which applies "
                f"{'log_softmax' if d['activation'] == 'softmax' else 'a sigmoid'} itself"
                + (f" (the loss at {os.path.basename(d['loss_line'])})" if d.get("loss_line") else ""))
    if f.kind == "probabilities_to_nll":
        return ("softmax output (probabilities) fed to nll_loss, which takes log-probabilities"
                + (f" (the loss at {os.path.basename(d['loss_line'])})" if d.get("loss_line") else ""))
    if f.kind == "broadcast_target":
        target = f" against a target {_shape(d['target_shape'])}" if d.get("target_shape") else ""
        return (f"{d['loss']} of an output {_shape(d['output_shape'])}{target}: broadcast to "
                f"{_shape(d['compared_shape'])}, every output compared with every target")
    if f.kind == "eval_mode":
        counts: dict[str, int] = {}
        for cls in d["modules_in_eval"]:
            counts[cls] = counts.get(cls, 0) + 1
        kinds = ", ".join(f"{n} {cls}" for cls, n in counts.items())
        return f"{d['model']} is in eval mode with {kinds} module(s) acting as at inference"
    if f.kind == "learning_rate":
        if d["how"] == "collapsed":
            rate = (f"the learning rate of group {d['group']} fell below 1e-6 of its peak at step {d['since_step']} "
                    f"({d['lr_peak']:.3g} at step {d['peak_step']}, {d['lr_now']:.3g} at step {d['checked_step']})")
        else:
            rate = (f"the learning rate of group {d['group']} rose past 1000 times its base at step "
                    f"{d['since_step']} ({d['lr_first']:.3g} at first, {d['lr_now']:.3g} now)")
        if d.get("scheduler"):
            rate += (f"; {d['scheduler']} was stepped {d['scheduler_steps']} times in {d['optimizer_steps']} "
                     "optimizer steps")
        return rate
    if f.kind == "update_ratio":
        steps = d["measured_steps"]
        return (f"the {d['statistic']} layer's ‖Δw‖/‖w‖ per step was {d['value']:.3g} at step {steps[-1]}, "
                f"{'below' if d['how'] == 'small' else 'above'} {d['bound']:g} at steps {', '.join(map(str, steps))}")
    if f.kind == "loss_climbs":
        return (f"the loss's median went from {d['from']:.4g} (steps {d['from_steps'][0]}-{d['from_steps'][1]}) to "
                f"{d['to']:.4g} (steps {d['to_steps'][0]}-{d['to_steps'][1]}), {d['times']:.3g}x")
    if f.kind == "loss_flat":
        return (f"the loss's lowest median, {d['to']:.4g} (steps {d['to_steps'][0]}-{d['to_steps'][1]}), is "
                f"{d['times']:.3g}x its first, {d['from']:.4g} (steps {d['from_steps'][0]}-{d['from_steps'][1]})")
    if f.kind == "clip_before_unscale" and "clip_value" in d:
        return (f"clip_grad_value_(clip_value={d['clip_value']:g}) clamped the gradients times GradScaler's scale "
                f"{d['scale']:g}: unscaled, every element was clamped at {d['unscaled_clip_value']:.3g}")
    if f.kind == "clip_before_unscale":
        return (f"clip_grad_norm_(max_norm={d['max_norm']:g}) measured {d['clipped_norm']:.4g}: the gradients times "
                f"GradScaler's scale {d['scale']:g} (unscaled, {d['unscaled_norm']:.4g}), so it shrank them "
                f"{d['factor']:.3g}-fold")
    if f.kind == "changed_outside":
        how = [f"{_count(d['reinitialised'], 'parameter')} re-initialised" if d["reinitialised"] else "",
               f"{_count(d['restored'], 'parameter')} put back as they were before the optimizer's step (its update undone)"
               if d["restored"] else ""]
        return (f"changed outside the optimizer before step {d['since_step']} and again before step {d['since_step'] + 1}: "
                f"{' and '.join(h for h in how if h)} (the largest change {d['relative_change']:.3g}x the weight's norm)")
    if f.kind == "identical_units":
        return (f"{_count(d['units'], 'row')} (up to {d['largest_group']} in one weight) were equal at step "
                f"{d['since_step']} and are still exactly equal after {_count(d['steps'], 'update')}: copies of one "
                "unit, which get the same gradient and never part")
    return _numbers(d)


def _rows_lines(rows: dict | None, indent: str = "  ") -> list[str]:
    """Which rows of the batch carry the step (watcher/rows/), in a line or two."""
    if not rows:
        return []
    if not rows.get("calls"):
        return [f"{indent}rows: not computed ({rows.get('why_not')})"]
    several = len(rows["calls"]) > 1
    named = ", ".join((f"call {r['call']} " if several else "") + f"{r['row']} ({r['share']:.0%})" for r in rows["top"])
    batch = sum(c["batch"] for c in rows["calls"])
    lines = [f"{indent}rows of the batch ({batch}, by {rows['how']}): {'row' if len(rows['top']) == 1 else 'rows'} "
             f"{named} hold{'s' if len(rows['top']) == 1 else ''} {rows['top_share']:.0%} of the rows' Σ‖g‖²"]
    before = rows.get("previous")
    if before is not None:
        typical = before["typical_grad_norm"]
        lines.append(f"{indent}the same batch at the previous step's weights: loss {before['loss']:.4g}, gradient norm "
                     f"{before['grad_norm']:.4g}" + (f" (typical {typical:.4g})" if typical else "") + ": "
                     + ("harmless, so the state of the weights, not the batch alone" if before["harmless"]
                        else f"out of line there too ({before['grad_norm'] / typical:.3g}x the typical gradient norm): the "
                        "batch itself, or a state already bad a step before" if typical and math.isfinite(before["grad_norm"])
                        else "not finite there either: the batch itself"))
    return lines


def _shape(shape: list[int]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


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
