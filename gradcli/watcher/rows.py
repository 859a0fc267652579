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

The per-sample losses need the loss: `LossNotes` (a detector that reports nothing) notes at each
backward which loss torch's graph ends in (cross_entropy/nll_loss, mse_loss, l1_loss,
binary_cross_entropy_with_logits), its target and its reduction, referenced, not copied. With it
the model's output gives each row's loss, and the same batch can be run at the previous step's
weights, which the optimizer's state gives back without a copy kept per step: Adam/AdamW's
update is lr·m̂/(√v̂+ε) from the moments its last step left, SGD's with momentum lr·buffer
(XXX: with the group's learning rate as it is now; a scheduler stepped since changes it). The
batch is `harmless` there when its gradient is finite and within HARMLESS times the run's
typical gradient norm: a batch that is bad at both is bad data, one that is harmless at the
previous weights met a bad state.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from .calls import detached, output_tensors
from .detectors import Detector

if TYPE_CHECKING:
    from .session import Watch

#: Rows computed per call at most (a larger batch: its first ROWS rows, said in `rows_of`).
ROWS = 512
#: The rows named: the fewest that hold at least this share of the rows' Σ‖g_i‖².
MOST = 0.5
#: At most this many rows are named.
NAMED = 8
#: The previous weights' gradient norm, at most this many times the run's typical one: harmless.
HARMLESS = 3.0
#: Per-sample gradients held at once by vmap (rows × parameters' elements).
VMAP_ELEMENTS = 1 << 24
#: Flagged (not stopped) steps whose rows are computed, per run.
FLAGGED = 4
#: Losses noted at most (backward calls between two applied steps: a GradScaler's skipped steps add up).
KEPT = 64

LOSSES = {"NllLossBackward0", "MseLossBackward0", "L1LossBackward0", "BinaryCrossEntropyWithLogitsBackward0"}


class LossNotes(Detector):
    """At each backward: the loss its root is (graph node, target, reduction), or None."""

    def __init__(self) -> None:
        self.notes: list[dict[str, Any] | None] = []
        self.flagged = 0  # flagged steps whose rows were computed

    def backward(self, run: "Watch", roots: list[torch.Tensor]) -> None:
        self.notes = [*self.notes[-KEPT:], *(_loss_note(root) for root in roots)]

    def applied(self, step: Any) -> None:
        self.notes = []


def _loss_note(root: torch.Tensor) -> dict[str, Any] | None:
    node = getattr(root, "grad_fn", None)
    while node is not None and node.name() in ("MulBackward0", "DivBackward0") and node.next_functions:
        node = node.next_functions[0][0]  # a loss divided by the accumulation steps
    if node is not None and node.name() == "MeanBackward0":
        return _hand_written_mse(node)
    if node is None or node.name() not in LOSSES:
        return None
    name = node.name()
    note = {"node": name, "target": node._saved_target, "reduction": node._saved_reduction}
    if name == "NllLossBackward0":
        inner = node.next_functions[0][0]
        note["log_softmax"] = inner is not None and inner.name() == "LogSoftmaxBackward0"
        index = int(node._saved_ignore_index)
        note["ignore_index"] = index - (1 << 64) if index >= 1 << 63 else index  # torch reads it back unsigned
        note["weight"] = node._saved_weight
    elif name == "BinaryCrossEntropyWithLogitsBackward0":
        note["weight"], note["pos_weight"] = node._saved_weight, node._saved_pos_weight
    return note


def _hand_written_mse(mean: Any) -> dict[str, Any] | None:
    """`((out - y) ** 2).mean()`: the target is the output less the residual the power saved
    (`target` is filled from the replayed output, which is the step's own)."""
    power = mean.next_functions[0][0]
    if power is None or power.name() != "PowBackward0" or power._saved_exponent != 2:
        return None
    sub = power.next_functions[0][0]
    if sub is None or sub.name() != "SubBackward0" or sub.next_functions[1][0] is not None:  # y needs no grad
        return None
    return {"node": "MseLossBackward0", "residual": power._saved_self, "target": None, "reduction": 1}


def rows_of(run: "Watch", optimizer: torch.optim.Optimizer, params: list[torch.Tensor], flagged: bool = False
            ) -> dict[str, Any] | None:
    """The rows of the step about to be applied (session.py calls it at a stop, and at a flagged
    step: at most FLAGGED of those per run); None when there is nothing to say. Never raises:
    gradcli's own calls meanwhile are not the run's (`run._paused`)."""
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
        found = _call_rows(call, note, trained)
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
            before = _previous_weights(optimizer, call.module, trained)
            if isinstance(before, str):
                whys.append(before)
            else:
                previous.append(_at_previous(call, note, trained, before))
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


def _call_rows(call: Any, note: dict[str, Any] | None, trained: set[int]) -> dict[str, Any] | str:
    """One call's rows: {how, batch, rows, losses, grad_norms, summed}, or why not."""
    module = _local(call.module)
    args, kwargs = detached(call.args), detached(call.kwargs or {})
    weights = {n: p for n, p in module.named_parameters() if id(p) in trained}
    if not weights:
        return "the model has no trained parameter"
    with _buffers_kept(module), torch.enable_grad():
        out = _forward(call, module, args, kwargs)
        outputs = [t for t in output_tensors(out) if t.requires_grad]
        grads = list(call.grads)
        if len(outputs) != len(grads) or not outputs:
            return "its outputs do not match those of the step"
        pairs = [(t, g) for t, g in zip(outputs, grads) if g is not None]
        n = pairs[0][0].shape[0] if pairs and pairs[0][0].dim() else 0
        if not n or any(t.dim() == 0 or t.shape[0] != n or g.shape != t.shape for t, g in pairs):
            return "its outputs have no common batch dimension"
        shown = min(n, ROWS)
        if note is not None and note.get("residual") is not None:  # y = out - (out - y)
            residual = note["residual"]
            out0 = pairs[0][0].detach().float()
            note["target"] = (out0 - residual).detach() if out0.shape == residual.shape else None
            if note["target"] is None:
                note = None
        losses = _row_losses(pairs[0][0].detach(), note, n) if len(pairs) == 1 else None
        whole = len(pairs) == len(output_tensors(out))  # every output carries a gradient: torch.func can pair them
        vmapped = whole and _vmappable(module) and _vmap_rows(module, weights, args, kwargs, pairs, n, shown)
        if vmapped:
            norms, summed = vmapped
            how = "vmap"
        else:
            norms, summed = _replayed_rows(weights, pairs, shown)
            how = "per_row"
    return {"how": how, "batch": n, "rows": shown, "losses": losses[:shown] if losses is not None else None,
            "grad_norms": norms, "summed": list(zip(weights.values(), summed))}


def _forward(call: Any, module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
    from contextlib import ExitStack

    with torch.random.fork_rng(devices=[]), ExitStack() as stack:
        torch.random.set_rng_state(call.rng)
        for device, dtype in call.autocast:
            stack.enter_context(torch.autocast(device, dtype=dtype))
        return module(*args, **kwargs)


def _vmappable(module: torch.nn.Module) -> bool:
    """Rows independent and no random draw: no BatchNorm in training mode, no active dropout."""
    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and (m.training or not m.track_running_stats):
            return False
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.training and m.p > 0:
            return False
    return True


def _vmap_rows(module: torch.nn.Module, weights: dict[str, torch.Tensor], args: Any, kwargs: Any,
               pairs: list[tuple[torch.Tensor, torch.Tensor]], n: int, shown: int) -> Any:
    """torch.func over the rows: (norms, Σ of the rows' gradients), or None when it cannot run."""
    from torch.func import functional_call, grad, vmap

    fixed = {k: v for k, v in module.named_parameters() if k not in weights}
    fixed.update(module.named_buffers())
    detached_weights = {k: v.detach() for k, v in weights.items()}
    batched_args = [isinstance(a, torch.Tensor) and a.dim() > 0 and a.shape[0] == n for a in args]
    batched_kwargs = {k: isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == n for k, v in kwargs.items()}
    cotangents = [g.detach() for _, g in pairs]

    def one_row(w: dict[str, torch.Tensor], row_args: list[Any], row_kwargs: dict[str, Any],
                row_cotangents: list[torch.Tensor]) -> torch.Tensor:
        a = [x.unsqueeze(0) if b else x for x, b in zip(row_args, batched_args)]
        k = {key: (v.unsqueeze(0) if batched_kwargs[key] else v) for key, v in row_kwargs.items()}
        out = functional_call(module, ({**w}, fixed), tuple(a), k)
        tensors = output_tensors(out)
        return sum((t * g.unsqueeze(0)).sum() for t, g in zip(tensors, row_cotangents))  # type: ignore[return-value]

    size = sum(w.numel() for w in weights.values())
    chunk = max(1, min(shown, VMAP_ELEMENTS // max(size, 1)))
    in_dims = ([0 if b else None for b in batched_args], {k: (0 if b else None) for k, b in batched_kwargs.items()},
               [0] * len(cotangents))
    norms: list[float] = []
    summed = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in weights.items()}
    try:
        for start in range(0, shown, chunk):
            stop = min(shown, start + chunk)
            part = ([a[start:stop] if b else a for a, b in zip(args, batched_args)],
                    {k: (v[start:stop] if batched_kwargs[k] else v) for k, v in kwargs.items()},
                    [c[start:stop] for c in cotangents])
            g = vmap(grad(one_row), in_dims=(None, *in_dims), randomness="error")(detached_weights, *part)
            squares = sum(x.double().flatten(1).pow(2).sum(1) for x in g.values())
            norms += squares.sqrt().tolist()  # type: ignore[union-attr]
            for k, x in g.items():
                summed[k] += x.double().sum(0)
    except Exception:  # noqa: BLE001 - a model torch.func cannot run: per-row replays instead
        return None
    return norms, list(summed.values())


def _replayed_rows(weights: dict[str, torch.Tensor], pairs: list[tuple[torch.Tensor, torch.Tensor]],
                   shown: int) -> tuple[list[float], list[torch.Tensor]]:
    """One backward per row of the forward already run, the other rows' gradients masked out."""
    tensors = [t for t, _ in pairs]
    values = list(weights.values())
    norms: list[float] = []
    summed = [torch.zeros_like(v, dtype=torch.float64) for v in values]
    for row in range(shown):
        masked = []
        for _, g in pairs:
            m = torch.zeros_like(g)
            m[row] = g[row]
            masked.append(m)
        found = torch.autograd.grad(tensors, values, masked, retain_graph=True, allow_unused=True)
        square = 0.0
        for i, x in enumerate(found):
            if x is not None:
                square += float(x.double().pow(2).sum())
                summed[i] += x.double()
        norms.append(math.sqrt(square))
    return norms, summed


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


def _row_losses(out: torch.Tensor, note: dict[str, Any] | None, n: int) -> list[float] | None:
    """Each row's own loss (its elements' mean), from the output and the loss noted at backward."""
    if note is None:
        return None
    functional = torch.nn.functional
    target = note["target"]
    out = out.float()
    with torch.no_grad():
        if note["node"] == "NllLossBackward0":
            classes = out.shape[-1] if out.dim() > 1 else 0
            if not classes or out.numel() // classes != target.numel():
                return None
            flat = out.reshape(-1, classes)
            flat = functional.log_softmax(flat, -1) if note["log_softmax"] else flat
            weight = note["weight"]
            each = functional.nll_loss(flat, target.reshape(-1), weight=weight, ignore_index=note["ignore_index"],
                                       reduction="none")
        elif out.numel() != target.numel():
            return None
        elif note["node"] == "MseLossBackward0":
            each = (out.reshape(target.shape) - target).pow(2)
        elif note["node"] == "L1LossBackward0":
            each = (out.reshape(target.shape) - target).abs()
        else:
            each = functional.binary_cross_entropy_with_logits(
                out.reshape(target.shape), target, weight=note["weight"], pos_weight=note["pos_weight"],
                reduction="none")
        if each.numel() % n:
            return None
        return each.reshape(n, -1).float().mean(1).tolist()


def _previous_weights(optimizer: torch.optim.Optimizer, module: torch.nn.Module,
                      trained: set[int]) -> dict[str, torch.Tensor] | str:
    """The module's trained weights before the optimizer's last step, from its state (above)."""
    groups = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    before: dict[str, torch.Tensor] = {}
    kind = type(optimizer).__name__
    with torch.no_grad():
        for name, p in module.named_parameters():
            if id(p) not in trained:
                continue
            group, state = groups.get(id(p)), optimizer.state.get(p, {})
            if group is None or not state:
                return "the previous weights are unknown (the optimizer has no state yet, or does not hold the model)"
            lr = float(group["lr"])
            if kind in ("Adam", "AdamW") and not group.get("amsgrad") and "exp_avg" in state:
                step = float(state["step"])
                beta1, beta2 = group["betas"]
                denom = (state["exp_avg_sq"] / (1 - beta2 ** step)).sqrt() + group["eps"]
                w = p + lr * (state["exp_avg"] / (1 - beta1 ** step)) / denom
                decay = float(group["weight_decay"])
                if kind == "AdamW" and decay:
                    w = w / (1 - lr * decay)
                elif decay:
                    return "the previous weights are unknown (Adam with weight_decay folds it into its moments)"
            elif kind == "SGD" and state.get("momentum_buffer") is not None and not group.get("nesterov"):
                w = p + lr * state["momentum_buffer"]
            else:
                return f"the previous weights are unknown ({kind}'s state does not give its last update back)"
            before[name] = w.to(p.dtype)
    return before


def _at_previous(call: Any, note: dict[str, Any], trained: set[int], before: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The same call and loss at the previous weights: the loss, its gradient's norm, each row's loss."""
    from torch.func import functional_call

    module = _local(call.module)
    weights = {k: v.detach().requires_grad_(True) for k, v in before.items()}
    args, kwargs = detached(call.args), detached(call.kwargs or {})
    with _buffers_kept(module), torch.enable_grad():
        from contextlib import ExitStack

        with torch.random.fork_rng(devices=[]), ExitStack() as stack:
            torch.random.set_rng_state(call.rng)
            for device, dtype in call.autocast:
                stack.enter_context(torch.autocast(device, dtype=dtype))
            out = functional_call(module, weights, args, kwargs, strict=False)
        tensor = next(t for t in output_tensors(out) if t.requires_grad)
        loss = _loss(tensor, note)
        found = torch.autograd.grad(loss, list(weights.values()), allow_unused=True)
    norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in found if g is not None))
    n = tensor.shape[0] if tensor.dim() else 1
    return {"loss": float(loss.detach()), "grad_norm": norm, "losses": _row_losses(tensor.detach(), note, n) or []}


def _loss(out: torch.Tensor, note: dict[str, Any]) -> torch.Tensor:
    """The noted loss, with its reduction, on an output (for the previous weights)."""
    functional = torch.nn.functional
    reduction = {0: "none", 1: "mean", 2: "sum"}[int(note["reduction"])]
    target = note["target"]
    out = out.float()
    if note["node"] == "NllLossBackward0":
        flat = out.reshape(-1, out.shape[-1])
        flat = functional.log_softmax(flat, -1) if note["log_softmax"] else flat
        loss = functional.nll_loss(flat, target.reshape(-1), weight=note["weight"], ignore_index=note["ignore_index"],
                                   reduction=reduction)
    elif note["node"] == "MseLossBackward0":
        loss = functional.mse_loss(out.reshape(target.shape), target, reduction=reduction)
    elif note["node"] == "L1LossBackward0":
        loss = functional.l1_loss(out.reshape(target.shape), target, reduction=reduction)
    else:
        loss = functional.binary_cross_entropy_with_logits(out.reshape(target.shape), target, weight=note["weight"],
                                                           pos_weight=note["pos_weight"], reduction=reduction)
    return loss.sum()


def _local(module: torch.nn.Module) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    return module.module if isinstance(module, DistributedDataParallel) else module


class _buffers_kept:
    """The module's buffers (BatchNorm's running statistics) as they were, after the replays."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.saved = [(b, b.detach().clone()) for b in module.buffers()]

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        with torch.no_grad():
            for buffer, value in self.saved:
                buffer.copy_(value)


def typical_norm(values: Any) -> float | None:
    """The median of a spike window of log norms (spikes.py), as a norm; None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    n = len(ordered)
    return math.exp(ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2)
