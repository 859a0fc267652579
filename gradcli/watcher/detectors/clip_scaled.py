"""Clipping before `scaler.unscale_()`: `clip_grad_norm_` (or `clip_grad_value_`) on gradients
still multiplied by the GradScaler's scale.

Under a GradScaler, backward gives the gradients times the scale (65536 at the start), and
`scaler.step()` divides them back before the update. A `clip_grad_norm_(params, max_norm)` in
between measures the scaled norm, so it clips every step by about the scale, and the update is
that much smaller than meant: no nan, the run just barely moves. torch's recipe calls
`scaler.unscale_(optimizer)` first, which marks the optimizer's stage UNSCALED in the scaler's
`_per_optimizer_states`; events.py notes that stage at each clip call (with the call's line).

At a check, a clip since the optimizer's last step over some of its parameters, made while a
scaler's stage for that optimizer was still READY (or not yet set this iteration), is the
finding. The evidence is the norm clip_grad_norm_ returned, the scale, and what the norm was
unscaled, read from the device only then (for clip_grad_value_: the value, and what it is unscaled).
"""

from __future__ import annotations

from typing import Any

from .found import Found
from .protocol import CheckedStep, Detector


class ClipScaled(Detector):
    def __init__(self) -> None:
        self.last: dict[int, int] = {}  # id(optimizer) -> backward calls at its last applied step
        self.reported = False

    def applied(self, step: CheckedStep) -> None:
        self.last[id(step.optimizer)] = step.run.events.backwards

    def check(self, step: CheckedStep) -> list[Found]:
        clips = step.run.events.clips
        if self.reported or not clips:
            return []
        from torch.amp.grad_scaler import OptState

        since = self.last.get(id(step.optimizer), 0)
        held = {id(p) for p in step.params}
        for clip in reversed(clips):  # the latest first: a skipped step's clip saw inf
            if clip.backwards <= since or not (clip.params & held) or (
                    clip.norm is not None and not bool(clip.norm.isfinite())):
                continue
            for ref, stages in clip.stages:
                scaler = ref()
                if scaler is None or stages.get(id(step.optimizer), OptState.READY) != OptState.READY:
                    continue
                self.reported = True
                return [Found("clip_before_unscale", [n for p, n in zip(step.params, step.names) if id(p) in clip.params],
                              _evidence(clip, scaler), modules=[], site=clip.site)]
        return []


def _evidence(clip: Any, scaler: Any) -> dict[str, Any]:
    scale = float(scaler.get_scale())
    if clip.norm is None:  # clip_grad_value_: each element clamped at clip_value, i.e. clip_value / scale unscaled
        return {"clip_value": clip.max_norm, "scale": scale, "unscaled_clip_value": clip.max_norm / scale}
    norm = float(clip.norm)
    return {"max_norm": clip.max_norm, "clipped_norm": norm, "scale": scale, "unscaled_norm": norm / scale,
            "factor": norm / clip.max_norm if norm > clip.max_norm else 1.0}
