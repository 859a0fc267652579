"""A DDP training script for `torchrun --nproc-per-node 2 -m gradcli watch examples/watch/ddp.py`
(gloo, CPU): only rank 1's targets hold an inf at step --at (default 3), so rank 1's loss is
not finite and, through DDP's all-reduce, every rank's gradients are nan. With --fsdp the model
is sharded by FSDP2 (`fully_shard`) instead: each rank holds a shard of each gradient."""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--at", type=int, default=3)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
if args.fsdp:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = fully_shard(net, mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
else:
    model = DistributedDataParallel(net)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.Generator().manual_seed(rank)
try:
    for step in range(1, args.steps + 1):
        x, y = torch.randn(8, 4, generator=data), torch.randn(8, 1, generator=data)
        if rank == 1 and step == args.at:
            y[0, 0] = float("inf")
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}")
finally:
    dist.destroy_process_group()
