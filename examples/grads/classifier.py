"""A small image classifier with two bugs that `gradcli grads` finds (README, "Gradient health").

    gradcli grads examples/grads/classifier.py:Net --var "x=randn(32, 3, 32, 32)" --loss "out.pow(2).mean()"

1. `proj` is left over from a refactor: defined, never called.
2. The auxiliary head's logits are detached, so `aux` never learns.
"""

import torch
from torch import nn


def block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = block(3, 16)
        self.stage1 = block(16, 32)
        self.stage2 = block(32, 64)
        self.proj = nn.Linear(64, 64)
        self.aux = nn.Linear(64, classes)
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        h = self.stem(x)
        h = self.stage1(nn.functional.max_pool2d(h, 2))
        h = self.stage2(nn.functional.max_pool2d(h, 2))
        features = h.mean(dim=(2, 3))
        return self.head(features) + 0.1 * self.aux(features).detach()
