"""Healthy models of four kinds, for `gradcli grads`: none of them gets a flag.

    gradcli grads examples/grads/healthy.py:MLP --var "x=randn(64, 32)" --loss "out.pow(2).mean()"

Each is built with PyTorch's default initialisation; the tests run each with a mean-squared
loss and expect no VANISHING, EXPLODING, ZERO or NO GRAD at the default thresholds.
"""

import torch
from torch import nn


class MLP(nn.Module):
    """Three Linear layers with ReLU: input (batch, 32), output (batch, 10)."""

    def __init__(self, width=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(32, width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, 10),
        )

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    """Conv-BatchNorm-ReLU-MaxPool twice, then a Linear head: input (batch, 3, 16, 16).

    The convolutions have no bias, as in torchvision's ResNets: BatchNorm subtracts the batch
    mean right after, so a bias there cannot change the output and gets (up to rounding) no
    gradient, which grads reports as VANISHING.
    """

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class LSTM(nn.Module):
    """A two-layer LSTM over (batch, time, 8) and a Linear head on the last step."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        hidden, _ = self.lstm(x)
        return self.head(hidden[:, -1])


class Transformer(nn.Module):
    """A TransformerEncoderLayer over (batch, tokens, 32) and a Linear head on the mean token."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))
