"""The same batch at the previous step's weights, given back by the optimizer's state.

No copy of the weights is kept per step: Adam's and AdamW's last update is lr·m̂/(√v̂+ε) from the
moments their step left, SGD's with momentum lr·buffer, so the weights before it are the weights
now plus that (AdamW's decay divided back out). XXX: with the group's learning rate as it is now;
a scheduler stepped since the last update changes it. Other optimizers: unknown, and said so.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..calls import detached, output_tensors
from ..calls import buffers_restored
from .gradients import local, replayed_forward
from .losses import loss_of, row_losses


def previous_weights(optimizer: torch.optim.Optimizer, module: torch.nn.Module,
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
            if group.get("maximize"):
                return "the previous weights are unknown (the optimizer maximizes)"
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


def at_previous(call: Any, note: dict[str, Any], trained: set[int], before: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The same call and loss at the previous weights: the loss, its gradient's norm, each row's loss."""
    from torch.func import functional_call

    module = local(call.module)
    weights = {k: v.detach().requires_grad_(True) for k, v in before.items()}
    args, kwargs = detached(call.args), detached(call.kwargs or {})
    with buffers_restored([module]), torch.enable_grad():
        out = replayed_forward(call, lambda: functional_call(module, weights, args, kwargs, strict=False))
        tensor = next(t for t in output_tensors(out) if t.requires_grad)
        loss = loss_of(tensor, note)
        found = torch.autograd.grad(loss, list(weights.values()), allow_unused=True)
    norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in found if g is not None))
    n = tensor.shape[0] if tensor.dim() else 1
    return {"loss": float(loss.detach()), "grad_norm": norm, "losses": row_losses(tensor.detach(), note, n) or []}
