"""Each row's gradient over one model call of the step: torch.func over the rows, or one backward
per row of the step replayed (rows/__init__.py says which and why)."""

from __future__ import annotations

import math
from contextlib import ExitStack
from typing import Any, Callable

import torch

from ..calls import buffers_restored, detached, output_tensors
from .losses import row_losses

#: Per-sample gradients held at once by vmap (rows × parameters' elements).
VMAP_ELEMENTS = 1 << 24


def call_rows(call: Any, note: dict[str, Any] | None, trained: set[int], limit: int) -> dict[str, Any] | str:
    """One call's rows: {how, batch, rows, losses, grad_norms, summed}, or why not."""
    module = local(call.module)
    args, kwargs = detached(call.args), detached(call.kwargs or {})
    weights = {n: p for n, p in module.named_parameters() if id(p) in trained}
    if not weights:
        return "the model has no trained parameter"
    with buffers_restored([module]), torch.enable_grad():
        out = replayed_forward(call, lambda: module(*args, **kwargs))
        outputs = [t for t in output_tensors(out) if t.requires_grad]
        grads = list(call.grads)
        if len(outputs) != len(grads) or not outputs:
            return "its outputs do not match those of the step"
        pairs = [(t, g) for t, g in zip(outputs, grads) if g is not None]
        n = pairs[0][0].shape[0] if pairs and pairs[0][0].dim() else 0
        if not n or any(t.dim() == 0 or t.shape[0] != n or g.shape != t.shape for t, g in pairs):
            return "its outputs have no common batch dimension"
        shown = min(n, limit)
        if note is not None and note.get("residual") is not None:  # y = out - (out - y)
            residual = note["residual"]
            out0 = pairs[0][0].detach().float()
            note["target"] = (out0 - residual).detach() if out0.shape == residual.shape else None
            if note["target"] is None:
                note = None
        losses = row_losses(pairs[0][0].detach(), note, n) if len(pairs) == 1 else None
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


def replayed_forward(call: Any, run: Callable[[], Any]) -> Any:
    """`run()` (the call's module on its arguments) from the call's random state, under its autocast."""
    with torch.random.fork_rng(devices=[]), ExitStack() as stack:
        torch.random.set_rng_state(call.rng)
        for device, dtype in call.autocast:
            stack.enter_context(torch.autocast(device, dtype=dtype))
        return run()


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


def local(module: torch.nn.Module) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    return module.module if isinstance(module, DistributedDataParallel) else module
