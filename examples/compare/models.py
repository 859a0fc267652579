"""Small models for `gradcli compare` (README, "Your training setup: compare")."""

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, width: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(32, width)
        self.fc2 = nn.Linear(width, width)
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.head(x)


class Dropout(nn.Module):
    """An MLP with dropout: in train mode every run draws its own mask."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = self.drop(x)
        return self.fc2(x)
