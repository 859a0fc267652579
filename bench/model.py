"""The benchmark's model: a deep residual MLP whose backward graph has ~5,000 nodes.

One file for both sides: `gradcli trace bench/model.py:DeepMLP` and the scripts that a user
would run instead (`torchviz_model.py`, `plain_model.py`) build the same model, inputs and
loss with the same seed. Each block is Linear -> LayerNorm -> GELU plus the skip connection:
about 9 backward nodes a block (4 of them AccumulateGrad for the 4 parameters).
"""

from __future__ import annotations

import torch
from torch import nn

from model_args import BATCH, BLOCKS, SEED, WIDTH


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return x + nn.functional.gelu(self.norm(self.fc(x)))


class DeepMLP(nn.Module):
    def __init__(self, blocks: int = BLOCKS, width: int = WIDTH) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Block(width) for _ in range(blocks)])
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.blocks(x))


def model_and_loss():
    """The model and its loss, built as `gradcli trace ... --seed 0` builds them."""
    torch.manual_seed(SEED)
    model = DeepMLP()
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(SEED), dtype=torch.float64).float()
    loss = model(x).pow(2).mean()
    return model, loss
