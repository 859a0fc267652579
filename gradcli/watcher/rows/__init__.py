"""Which rows of the batch carry a bad step: per-sample losses and gradient norms, and the same
batch at the previous step's weights.

A step stopped (non-finite) or flagged (a loss or gradient spike, a layer's g² far above Adam's
v) is most often one bad sample or a bad state of the weights. A row's gradient here is the part
of the step's gradient that flows from that row's outputs: the vector-Jacobian product of the
model's call with the gradient that arrived at that row of its outputs in the real step
(session.py keeps it). The rows' gradients add up to the step's (the product is linear in that
gradient), whatever the loss, and no loss has to be run again. Two ways to compute them:

- `torch.func`: `vmap(grad(...))` over the rows through `functional_call`, for a model whose rows
  do not meet (no BatchNorm in training mode) and that draws no random numbers;
- per-row replays otherwise: the step's forward once (from its random state: dropout draws the
  same masks), then one backward per row with the other rows' gradients masked out (BatchNorm's
  rows do meet, and the product still splits exactly).

The per-sample losses need the loss, noted at backward (rows/losses.py). With it the model's
output gives each row's loss, and the same batch can be run at the previous step's weights
(rows/previous.py). The batch is `harmless` there when its gradient is finite and within
HARMLESS times the run's typical gradient norm: a batch that is bad at both is bad data (or a
state already bad a step earlier), one that is harmless at the previous weights met a bad state.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .gradients import call_rows
from .losses import LossNotes
from .previous import at_previous, previous_weights

#: Rows computed per call at most (a larger batch: its first ROWS rows).
ROWS = 512
#: The rows named: the fewest that hold at least this share of the rows' Σ‖g_i‖².
MOST = 0.5
#: At most this many rows are named.
NAMED = 8
#: The previous weights' gradient norm, at most this many times the run's typical one: harmless.
HARMLESS = 3.0
#: Flagged (not stopped) steps whose rows are computed, per run.
FLAGGED = 4


def rows_of(run: Any, optimizer: torch.optim.Optimizer, params: list[torch.Tensor], flagged: bool = False
            ) -> dict[str, Any] | None:
    """The rows of the step about to be applied (session.py calls it at a stop, and at a flagged
    step: at most FLAGGED of those per run); None when there is nothing to say. Never raises:
    gradcli's own calls meanwhile are not the run's (`run._paused`). `run` is session.py's Watch
    (its calls, detectors and watched optimizers), not imported: session.py imports this."""
    calls = [c for c in run.calls if c.grads]
    notes = next((d for d in run.detectors if isinstance(d, LossNotes)), None)
    if not calls or run.dropped or notes is None or (flagged and notes.flagged >= FLAGGED):
        return None
    notes.flagged += flagged
    watched = run.watched.get(id(optimizer))
    typical = typical_norm(watched.grad_spikes.values) if watched is not None and watched.grad_spikes else None
    losses = notes.notes[-len(calls):] if len(notes.notes) >= len(calls) else [None] * len(calls)  # the latest
    run._paused = True
    try:
        return _rows(calls, losses, optimizer, params, typical)
    except Exception as err:  # noqa: BLE001 - rows that cannot be computed must not hide the stop
        return {"why_not": f"{type(err).__name__}: {err}"}
    finally:
        run._paused = False


def _rows(calls: list[Any], notes: list[Any], optimizer: torch.optim.Optimizer, params: list[torch.Tensor],
          typical: float | None) -> dict[str, Any]:
    trained = {id(p) for p in params}
    per_call, hows, whys = [], set(), []
    previous: list[dict[str, Any]] = []
    held_by: dict[int, torch.Tensor] = {}
    summed: dict[int, torch.Tensor] = {}  # id(parameter) -> Σ of the rows' gradients, over the calls
    whole = True  # every row of every call computed
    for index, (call, note) in enumerate(zip(calls, notes)):
        found = call_rows(call, note, trained, ROWS)
        if isinstance(found, str):
            whys.append(f"call {index}: {found}")
            whole = False
            continue
        hows.add(found.pop("how"))
        for p, s in found.pop("summed"):
            summed[id(p)] = summed[id(p)] + s if id(p) in summed else s
            held_by[id(p)] = p
        whole = whole and found["rows"] == found["batch"]
        per_call.append({"call": index, **found})
        if note is not None and note.get("target") is not None:
            before = previous_weights(optimizer, call.module, trained)
            if isinstance(before, str):
                whys.append(before)
            else:
                previous.append(at_previous(call, note, trained, before))
    if not per_call:
        return {"why_not": "; ".join(whys)}
    squares = [(c["call"], r, n * n if math.isfinite(n) else math.inf) for c in per_call
               for r, n in enumerate(c["grad_norms"])]
    total = sum(s for _, _, s in squares)
    ordered = sorted(squares, key=lambda s: -s[2])
    named, held = [], 0.0
    for call, row, square in ordered[:NAMED]:
        named.append({"call": call, "row": row, "share": square / total if math.isfinite(total) and total > 0
                      else (1.0 if math.isinf(square) else 0.0)})
        held += named[-1]["share"]
        if held >= MOST:
            break
    result: dict[str, Any] = {"how": "/".join(sorted(hows)), "calls": per_call, "top": named,
                              "top_share": held, "sums_to": _difference(summed, held_by) if whole else None,
                              "previous": None, "why_not": "; ".join(whys) or None}
    if previous:
        loss = sum(p["loss"] for p in previous)
        norm = math.sqrt(sum(p["grad_norm"] ** 2 for p in previous))
        finite = math.isfinite(loss) and math.isfinite(norm)
        result["previous"] = {"loss": loss, "grad_norm": norm, "typical_grad_norm": typical,
                              "harmless": finite and (typical is None or norm <= HARMLESS * typical),
                              "losses": [x for p in previous for x in p["losses"]]}
    return result


def _difference(summed: dict[int, torch.Tensor], params: dict[int, torch.Tensor]) -> float | None:
    """‖Σ rows − the parameters' .grad‖ / ‖.grad‖: 0 up to rounding when the calls made the whole
    step's gradient (no carried, clipped or unscaled gradient); None when a gradient is missing."""
    grads = {k: params[k].grad for k in summed}
    if any(g is None for g in grads.values()):
        return None
    with torch.no_grad():
        diff = sum(float((summed[k] - g.double()).pow(2).sum()) for k, g in grads.items())  # type: ignore[union-attr]
        norm = sum(float(g.double().pow(2).sum()) for g in grads.values())  # type: ignore[union-attr]
    return math.sqrt(diff / norm) if norm > 0 and math.isfinite(diff) else None


def typical_norm(values: Any) -> float | None:
    """The median of a spike window of log norms (spikes.py), as a norm; None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    n = len(ordered)
    return math.exp(ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2)
