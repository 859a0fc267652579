"""The model of the `grads` comparison: a plain 24-layer MLP, width 1024, ReLU.

    gradcli grads bench/mlp24.py:MLP24 --var "x=randn(64, 1024)" --loss "out.pow(2).mean()"
"""

from torch import nn

DEPTH, WIDTH = 24, 1024


class MLP24(nn.Module):
    def __init__(self):
        super().__init__()
        layers = []
        for _ in range(DEPTH):
            layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
        self.layers = nn.Sequential(*layers[:-1])

    def forward(self, x):
        return self.layers(x)
