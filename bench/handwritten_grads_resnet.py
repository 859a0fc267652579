"""What a user writes instead of `gradcli grads torchvision.models:resnet18`: the same model,
inputs and loss (real_models.py), one forward and backward, then per parameter its gradient's
norm, largest magnitude and share of exact zeros."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_models import resnet_and_loss  # noqa: E402

model, loss = resnet_and_loss()
loss.backward()
for name, p in model.named_parameters():
    g = p.grad
    zeros = (g == 0).sum().item() / g.numel()
    print(f"{name:36s} {tuple(p.shape)!s:18s} norm {g.norm().item():.4g}  max {g.abs().max().item():.4g}  zero {zeros:.1%}")
