"""What a user writes instead of `gradcli compare` on bench/mlp24.py: the same model, the
reference (eager float32) and the candidate (autocast bfloat16) each on a copy, one forward
and backward each on a batch of 64, and every parameter's relative gradient error printed."""

import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlp24 import MLP24, WIDTH  # noqa: E402

torch.manual_seed(0)
model = MLP24()
x = torch.randn(64, WIDTH)


def gradients(amp):
    work = copy.deepcopy(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        loss = work(x).pow(2).mean()
    loss.backward()
    return {name: p.grad for name, p in work.named_parameters()}


reference, candidate = gradients(False), gradients(True)
for name, g in reference.items():
    rel = (candidate[name].double() - g.double()).norm() / g.double().norm()
    print(f"{name:24s} {rel.item():.3e}")
