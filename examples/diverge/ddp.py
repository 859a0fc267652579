"""A script that trains on one process or under torchrun, for `gradcli diverge --b ranks:2`:
the same 32-sample batches either way, each rank taking its share (rank r: samples r, r+N, ...).

    gradcli diverge --b ranks:2 examples/diverge/ddp.py                  # DDP averages: within the band
    gradcli diverge --b ranks:2 examples/diverge/ddp.py --batchnorm      # each rank normalises its own half
    gradcli diverge --b ranks:2 examples/diverge/ddp.py --scale-loss     # the loss multiplied by the world size

Under torchrun (RANK set) it joins a gloo process group and wraps the model in DDP.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--batchnorm", action="store_true", help="a BatchNorm1d, not synchronised across ranks")
parser.add_argument("--scale-loss", action="store_true", help="the loss multiplied by the world size (DDP already averages)")
opts = parser.parse_args()

distributed = "RANK" in os.environ
if distributed:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16) if opts.batchnorm else nn.Identity(), nn.Tanh(), nn.Linear(16, 1))
model = DistributedDataParallel(net) if distributed else net
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.Generator().manual_seed(1)
try:
    for step in range(1, opts.steps + 1):
        x = torch.randn(32, 8, generator=data)
        y = torch.sin(x.sum(dim=1, keepdim=True))
        x, y = x[rank::world], y[rank::world]
        loss = nn.functional.mse_loss(model(x), y)
        if opts.scale_loss:
            loss = loss * world
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
finally:
    if distributed:
        dist.destroy_process_group()
