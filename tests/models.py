"""The small models and autograd Functions more than one test file uses, defined once.

A test that needs a healthy MLP, CNN, LSTM or Transformer layer, or the cube Function that saves
its own input, imports it from here rather than writing its own copy (two copies drift: the one
fixed, the other not). A model whose exact shape a test's own numbers are about stays in that
test, and a model written into a script a subprocess runs stays in the script.
Every class here is what torch would build from its layers; no test's truth comes from here.
"""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """16 -> 32 -> 32 -> 4, ReLU then tanh: a healthy MLP whose gradients no check flags."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.head(torch.tanh(self.fc2(torch.relu(self.fc1(x)))))


class CNN(nn.Module):
    """Two 3x3 convolutions with BatchNorm over a (N, 3, 6, 6) input, then a linear head to 4."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.head = nn.Linear(8 * 6 * 6, 4)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.head(x.flatten(1))


class LSTM(nn.Module):
    """An LSTM over (N, T, 8), its last step's output through a linear head to 4."""

    def __init__(self):
        super().__init__()
        self.lstm, self.head = nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


class Transformer(nn.Module):
    """One encoder layer (width 16, 2 heads, no dropout) over (N, T, 16), mean-pooled to a head of 4."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


class Cube(torch.autograd.Function):
    """x³ as a custom Function that saves its input itself (ctx.save_for_backward); 3x²·grad back."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * grad
