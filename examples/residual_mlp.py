"""A small residual classifier with a deliberate bug that `gradcli trace` finds.

    gradcli trace examples/residual_mlp.py:ResidualMLP --var "x=randn(4,4)" --loss "out.pow(2).mean()"

exits 1: `Block.forward` adds the skip connection in place (`out += x`) to the output of a
ReLU, and ReLU saved that output for its backward. The trace names the tensor, the line that
saved it and the line that modified it. Writing `out = out + x` fixes it.
"""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.ReLU()

    def forward(self, x):
        out = self.act(self.fc(x))
        out += x  # the bug: ReLU saved `out` for backward, and this changes it in place
        return out


class ResidualMLP(nn.Module):
    def __init__(self, features=4, hidden=8, classes=3):
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.block = Block(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        h = self.block(h)
        return self.head(h)
