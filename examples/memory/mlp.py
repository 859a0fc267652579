"""Models for `gradcli memory`: what their backward keeps alive, and which checkpoint pays.

    gradcli memory examples/memory/mlp.py:MLP --var "x=randn(64, 256)" --loss "out.pow(2).mean()"
    gradcli memory examples/memory/mlp.py:DeepMLP --var "x=randn(64, 128)" --loss "out.pow(2).mean()" --depth 2
"""

import torch
from torch import nn


class MLP(nn.Module):
    """Three Linear layers with ReLU between: each Linear saves its input, each ReLU its output."""

    def __init__(self, width=512):
        super().__init__()
        self.fc1 = nn.Linear(256, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, 10)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.relu(self.fc2(h))
        return self.fc3(h)


class Block(nn.Module):
    """Linear, GELU, Linear with a residual: the GELU's input and output are saved inside."""

    def __init__(self, width, hidden):
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x):
        h = nn.functional.gelu(self.up(x))
        return x + self.down(h)


class DeepMLP(nn.Module):
    """Eight residual blocks of width 128 (hidden 512): a model checkpointing helps."""

    def __init__(self, depth=8, width=128, hidden=512):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, hidden) for _ in range(depth))
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)
