"""Steps between backward and optimizer.step, for `gradcli compare ... --before-step FILE:NAME`.

    gradcli compare examples/distributed/models.py:MLP --var "x=randn(16, 8)" --loss "out.pow(2).mean()" \
        --fsdp 2 --before-step examples/distributed/steps.py:clip_local_norm
"""

import torch
from torch.distributed.tensor import DTensor

MAX_NORM = 0.1


def clip_local_norm(model):
    """Clipping written for speed, without DTensor: the norm of this process's own elements.
    On one process that is the whole gradient; under FSDP2 each rank holds 1/N of every
    gradient, so each clips its shard by a different factor."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    local = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in local]))
    scale = torch.clamp(MAX_NORM / (total + 1e-6), max=1.0)
    for g in local:
        g.mul_(scale)


def clip_whole_norm(model):
    """The same clipping by torch: on DTensor gradients it reduces the norm over every rank."""
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
