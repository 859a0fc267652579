"""What a user writes instead of `gradcli compare bench/mlp24.py:MLP24 ... --ddp 2`: spawn two
gloo ranks, wrap the same model (same seed) in DDP, each rank one forward and backward on its
half of the batch (x[rank::2], as DistributedSampler), and on rank 0 the same model on one
process with the whole batch; print every parameter's relative error (rank 0 only: gradcli
also compares every rank's gradients with each other)."""

import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlp24 import MLP24, WIDTH  # noqa: E402

WORLD, BATCH = 2, 64


def rank_main(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = MLP24()
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(1))
    reference = None
    if rank == 0:
        torch.manual_seed(0)
        reference = MLP24()
        reference(x).pow(2).mean().backward()
    DistributedDataParallel(model)(x[rank::WORLD]).pow(2).mean().backward()
    if rank == 0:
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            rel = ((p.grad.double() - q.grad.double()).norm() / q.grad.double().norm()).item()
            print(f"{name:24s} rel err {rel:.2e} {'ok' if rel < 1e-5 else 'DIFFERS'}")
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    mp.spawn(rank_main, args=(free,), nprocs=WORLD)
