"""A model built on examples/custom_ops, for `gradcli check-function examples/custom_ops_model.py:Net`:
it checks the custom Functions this forward applies, at the tensors they receive."""

import torch
from torch import nn

from custom_ops import LeakyReLU, RMSNorm, Swish


class Net(nn.Module):
    def __init__(self, width: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(4, width)
        self.fc2 = nn.Linear(width, 2)

    def forward(self, x):
        h = RMSNorm.apply(Swish.apply(self.fc1(x)))
        return self.fc2(LeakyReLU.apply(h, 0.1))
