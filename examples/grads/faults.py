"""Models with one known gradient fault each, for `gradcli grads`.

    gradcli grads examples/grads/faults.py:DetachedBranch --var "x=randn(16, 8)" --loss "out.pow(2).mean()"

Every class is a small, realistic nn.Module whose forward takes x (batch, 8), except where
its docstring says otherwise. The tests diagnose each one with the right flag, parameter
and reason.
"""

import torch
from torch import nn


class DetachedBranch(nn.Module):
    """`skip`'s output is detached, so `skip` gets no gradient (NO GRAD, the line below)."""

    def __init__(self):
        super().__init__()
        self.main = nn.Linear(8, 8)
        self.skip = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        main = torch.relu(self.main(x))
        skip = self.skip(x).detach()
        return self.head(main + skip)


class UnusedLayer(nn.Module):
    """`extra` is defined and never called in forward (NO GRAD: never ran)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.extra = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


class NoGradEncoder(nn.Module):
    """`encoder` runs under torch.no_grad() (NO GRAD: no_grad, the line that calls it)."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        with torch.no_grad():
            features = self.encoder(x)
        return self.head(features)


class DataInForward(nn.Module):
    """`.data` cuts the graph between `first` and `second` (NO GRAD on `first`)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 2)

    def forward(self, x):
        h = torch.tanh(self.first(x))
        return self.second(h.data)


class FrozenBackbone(nn.Module):
    """A backbone with requires_grad=False and a trained head: frozen, not a problem."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
        self.head = nn.Linear(16, 2)
        self.backbone.requires_grad_(False)

    def forward(self, x):
        return self.head(self.backbone(x))


class DeadReLU(nn.Module):
    """`hidden`'s bias is -100: the ReLU after it outputs only zeros (ZERO on `hidden` and on
    `out.weight`, whose input is those zeros)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.hidden = nn.Linear(16, 16)
        self.out = nn.Linear(16, 2)
        with torch.no_grad():
            self.hidden.bias.fill_(-100.0)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        h = torch.relu(self.hidden(h))
        return self.out(h)


class DeepMLP(nn.Module):
    """A plain `depth`-layer MLP (Linear + ReLU), weights drawn with standard deviation `std`
    times He's sqrt(2 / fan_in) and zero biases. std=1 is He initialisation (healthy)."""

    def __init__(self, depth=40, width=64, std=1.0):
        super().__init__()
        layers = []
        for _ in range(depth):
            linear = nn.Linear(width, width)
            nn.init.normal_(linear.weight, std=std * (2.0 / width) ** 0.5)
            nn.init.zeros_(linear.bias)
            layers += [linear, nn.ReLU()]
        self.layers = nn.Sequential(*layers[:-1])  # no ReLU after the last Linear

    def forward(self, x):
        return self.layers(x)


class ExplodingMLP(DeepMLP):
    """DeepMLP with 1.5x He's scale: activations and gradients grow ~1.5x per layer (EXPLODING)."""

    def __init__(self):
        super().__init__(depth=40, width=64, std=1.5)


class VanishingMLP(DeepMLP):
    """DeepMLP with 0.5x He's scale: gradients shrink ~0.5x per layer (VANISHING)."""

    def __init__(self):
        super().__init__(depth=40, width=64, std=0.5)


class LogOfSoftmax(nn.Module):
    """Returns its own loss, -log(softmax(logits)[:, 0]): softmax of large logits is exactly 0
    in float32, so log gives -inf and backward nan (NONFINITE, the line below). Takes x (batch, 8)."""

    def __init__(self):
        super().__init__()
        self.classifier = nn.Linear(8, 4)
        with torch.no_grad():
            self.classifier.weight.mul_(1000.0)

    def forward(self, x):
        probs = torch.softmax(self.classifier(x), dim=1)
        return -torch.log(probs[:, 0]).mean()
