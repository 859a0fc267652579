"""A small training script to run twice: what `gradcli diverge` is shown and tested on.

    gradcli diverge --b compile:aot_eager examples/diverge/train.py --steps 20              # within the band
    gradcli diverge --b compile:aot_eager examples/diverge/train.py --hook-at 5             # parts at step 5
    gradcli diverge --b same examples/diverge/train.py --unseeded                           # parts at step 1, data

Options switch on what happens in real runs:
  --hook-at K   a forward hook registered on the activation at step K (after a compile)
  --unseeded    an augmentation (noise on the inputs) drawn from a generator nobody seeds
  --dropout P   a Dropout layer
  --norm        a hand-written RMSNorm after the first layer, and inputs that grow with the step
                (x 40 per step): in float16 its square passes 65504 after a few steps
  --bad-batch K the batch of step K scaled by 1e5 (a corrupt batch): float32 takes it, float16's
                largest is 65504, so under autocast:float16 the loss of step K is nan
The model is seeded, and the data comes from a generator seeded once, so the script as
written computes the same steps every time.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


#: --norm: the inputs' scale at step k is GROWTH * k.
GROWTH = 40.0
#: --bad-batch: the corrupt batch's scale (past float16's largest, 65504).
BAD = 1e5


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²)), written by hand: x * x is computed in x's own dtype."""

    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


class MLP(nn.Module):
    def __init__(self, dropout: float = 0.0, norm: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.norm = RMSNorm(32) if norm else nn.Identity()
        self.act = nn.Tanh()
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.norm(self.fc1(x)))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--hook-at", type=int, default=None)
    parser.add_argument("--unseeded", action="store_true")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--norm", action="store_true")
    parser.add_argument("--bad-batch", type=int, default=None)
    opts = parser.parse_args()
    torch.manual_seed(0)
    model = MLP(opts.dropout, opts.norm)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(1)
    noise = torch.Generator()
    noise.seed()  # an augmentation's generator nobody seeds: another draw every run
    for step in range(1, opts.steps + 1):
        if step == opts.hook_at:
            model.act.register_forward_hook(lambda module, args, out: out * 0.5)
        x = torch.randn(32, 8, generator=data)
        y = torch.sin(x.sum(dim=1, keepdim=True))
        if opts.norm:
            x = x * GROWTH * step
        if step == opts.bad_batch:
            x = x * BAD
        if opts.unseeded:
            x = x + 0.01 * torch.randn(x.shape, generator=noise)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
