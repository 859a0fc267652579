"""What a user writes instead of `gradcli grads` on bench/mlp24.py: build the same model, one
forward and backward on a random batch of 64 (float32), print every parameter's grad norm."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlp24 import MLP24, WIDTH  # noqa: E402

torch.manual_seed(0)
model = MLP24()
x = torch.randn(64, WIDTH)
model(x).pow(2).mean().backward()
for name, p in model.named_parameters():
    print(f"{name:24s} {tuple(p.shape)!s:14s} {p.grad.norm().item():.4g}")
