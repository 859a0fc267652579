"""`gradcli diverge` for people: the two setups, the verdict (where and why the runs part, or
that they stayed within the band), then the steps around the parting as a table.

Renderer contract: a DivergeResult in, lines out. Every word about a divergence is chosen here.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from .memory import table

if TYPE_CHECKING:
    from ...divergence.result import Cause, DivergeResult

#: Steps shown before the parting step, and after it.
BEFORE, AFTER = 2, 3
_PHASE_WORDS = {"data": "the data: the two runs were given other batches",
                "forward": "the forward: the same batch and weights, other activations",
                "backward": "the backward: the same loss, other gradients",
                "update": "the update: the same gradients, other weights after the step"}


def diverge_lines(result: DivergeResult) -> list[str]:
    lines = [f"{result.script}: a = {result.a.text} ({_setup(result.a, result.torch[0])}), "
             f"b = {result.b.text} ({_setup(result.b, result.torch[1])})",
             f"band: {result.band.factor:g} x (float32's drift from float64, measured each step, x {result.band.ratio:g}"
             f" + {result.band.precision}'s unit roundoff)", ""]
    parted = result.parted_at
    lines += _stops(result)
    if parted is None and not result.stops:
        lines.append(f"OK: the runs stay within the band over the {len(result.steps)} steps run.")
    elif parted is None:
        lines.append(f"Within the band over the {len(result.steps)} steps both runs reached.")
    else:
        phase = result.parted or "data"
        lines.append(f"PARTED at step {parted.step}, in {_PHASE_WORDS[phase]}.")
        where = result.where
        if where is not None:
            place = f"{os.path.basename(where.file)}:{where.line}" if where.file else "(no line)"
            far = "" if math.isnan(where.bands) else f", {_bands(where.bands)} bands apart"
            lines.append(f"  module: {where.module} ({where.module_class}){far}")
            if where.file:
                lines.append(f"  line:   {place}  {where.code or ''}".rstrip())
        elif phase in ("forward", "backward"):
            lines.append("  module: not located")
        if result.node:
            lines.append(f"  node:   {result.node}")
        if phase == "backward" and parted.grad_worst:
            lines.append(f"  worst gradient: {parted.grad_worst}, {_bands(parted.grad_ratio)} bands apart")
        if phase == "update" and parted.param_worst:
            lines.append(f"  worst parameter: {parted.param_worst}, {_bands(parted.param_ratio)} bands apart")
        if result.cause is not None:
            lines += ["  cause:  " + _cause(result.cause, result)]
    lines += ["", *_steps(result), *_costs(result)]
    lines += [f"note: {note}" for note in result.notes]
    return lines


def _setup(setup: Any, torch: str | None) -> str:
    return setup.describe() + (f"; torch {torch}" if torch else "")


def _stops(result: DivergeResult) -> list[str]:
    """Each run watch stops, in watch's own words (render/training/watch.py)."""
    from ...watcher.result import WatchResult
    from .watch import stop_lines

    lines = []
    for s in result.stops:
        lines.append(f"STOPPED: run {s.run} ({s.setup.text}) at step {s.stop.step}, as gradcli watch stops it:")
        watched = WatchResult(checks=s.checks, skipped=s.skipped, stop=s.stop, notes=s.notes)
        lines += ["  " + line for line in stop_lines(f"run {s.run}", watched)]
        lines += [f"  note: {note}" for note in s.notes]
        lines.append("")
    return lines


def _costs(result: DivergeResult) -> list[str]:
    """The recorder's measured cost per step, against the script's own step (divergence/cost.py)."""
    lines = []
    for side, cost in zip("ab", result.costs):
        if cost is None:
            continue
        share = f", {cost.overhead * 100:.2g}% on the script's own {_ms(cost.script_seconds)}" if cost.overhead is not None else ""
        lines.append(f"  run {side}: {_ms(cost.step_seconds)} per step, of which the recorder {_ms(cost.recorder_seconds)}"
                     f"{share} (medians of {cost.steps_timed} steps)")
    if lines:
        lines.insert(0, "cost (measured in the runs, side by side on this machine's cores):")
    return lines


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _cause(cause: Cause, result: DivergeResult) -> str:
    d = cause.detail
    if cause.kind == "batches-differ":
        again = " (the same setup twice: the script is not reproducible)" if d["same_setup"] else ""
        return (f"the batches differ from step {d['step']}{again}; seed what draws the data (an augmentation, "
                "a shuffle, DataLoader(generator=..., worker_init_fn=...)) before comparing the math")
    if cause.kind == "hook-after-compile":
        hook = d["hook"]
        at = f" ({os.path.basename(hook['file'])}:{hook['line']})" if hook.get("file") else ""
        return (f"a forward hook on {d['module']}{at} appeared at step {d['registered_at']}, after the model was compiled "
                f"({d['compiled']}): dynamo does not guard module hooks, so the compiled model never runs it; register "
                "hooks before compiling, or call torch._dynamo.reset() after")
    if cause.kind == "overflow":
        limit = " (float16's largest is 65504)" if d["dtype"] == "float16" else ""
        where = f"{d['call']}() in {d['module']}" if d.get("call") else d["module"]
        return (f"{where} made an {d['kind']} in {d['dtype']} in run {d['run']} ({d['setup']}) only{limit}; "
                "compute it in float32 (x.float()), or scale it down first")
    if cause.kind == "random-ops":
        modules = f" ({', '.join(d['modules'])})" if d["modules"] else ""
        return (f"the forward draws random numbers{modules}, and {d['compiled']} draws its own; align them with "
                "torch._inductor.config.fallback_random = True, or compare in eval mode")
    if cause.kind == "batchnorm-per-rank":
        return (f"{', '.join(d['modules'])}: BatchNorm on {d['ranks']} ranks normalises each rank's shard with its own "
                "statistics; nn.SyncBatchNorm.convert_sync_batchnorm(model) computes them over the whole batch")
    if cause.kind == "gradients-scaled":
        return (f"every gradient on {d['ranks']} ranks is {d['ratio']:.3g} times the one process's: DDP already averages "
                "the gradients over the ranks, so a loss scaled by the world size is scaled twice")
    return f"run {d['run']} skipped step {d['step']}: its scaled gradient was not finite (the loss scale is halved)"


def _steps(result: DivergeResult) -> list[str]:
    steps = result.steps
    if not steps:
        return []
    k = (result.parted_at.step - 1) if result.parted_at else len(steps) - 1
    shown = steps[max(k - BEFORE, 0): k + AFTER + 1] if result.parted_at else steps[-BEFORE - 1:]
    rows = [[str(s.step), {True: "same", False: "differ", None: "-"}[s.batch_same], _loss(s.loss[0]), _loss(s.loss[1]),
             _bands(s.loss_ratio), _bands(s.grad_ratio), _bands(s.param_ratio), s.phase or "-"] for s in shown]
    return table(["step", "batch", "loss a", "loss b", "loss", "grads", "weights", "parted"], rows, {0, 2, 3, 4, 5, 6}) + \
        ["  (loss, grads, weights: the distance between the runs in bands; above 1 is past the band)"]


def _loss(x: Any) -> str:
    return "-" if x is None else f"{x:.6g}"


def _bands(x: float) -> str:
    if math.isinf(x):
        return "inf"
    return f"{x:.2g}" if x < 100 else f"{x:.3g}" if x < 1000 else f"{x:.2e}"
