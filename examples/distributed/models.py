"""Small models for `gradcli compare --ddp N` / `--fsdp N` and `gradcli grads --ddp N`.

    gradcli compare examples/distributed/models.py:MLP --var "x=randn(16, 8)" --loss "out.pow(2).mean()" --ddp 2
"""

import torch
from torch import nn


class MLP(nn.Module):
    """Healthy: its gradients on N ranks are those of one process."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.l1 = nn.Linear(8, width)
        self.l2 = nn.Linear(width, 4)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)))


class WithBatchNorm(nn.Module):
    """BatchNorm1d normalises each rank's shard with the shard's own statistics."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.bn(self.l1(x))))


class AuxHead(nn.Module):
    """A head built in __init__ and never called in forward: DDP never reduces its bucket."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.aux = nn.Linear(16, 4)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)))


class RankOneFails(nn.Module):
    """Raises on rank 1 only: the group ends with rank 1's error."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(8, 4)

    def forward(self, x):
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_rank() == 1:
            raise ValueError("rank 1 cannot take this batch")
        return self.l1(x)


class SeededByRank(nn.Module):
    """Initialises from its rank's own seed: DDP broadcasts rank 0's weights, fully_shard does not."""

    def __init__(self):
        super().__init__()
        import os

        torch.manual_seed(int(os.environ.get("RANK", "0")) + 1)
        self.l1 = nn.Linear(8, 16)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)))


class HeadOnRankZero(nn.Module):
    """Calls its second head on rank 0 only (data-dependent branches do this): DDP without
    find_unused_parameters would wait forever for the head's bucket on the other rank."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)
        self.extra = nn.Linear(16, 4)

    def forward(self, x):
        import torch.distributed as dist

        h = torch.tanh(self.l1(x))
        out = self.head(h)
        if not dist.is_initialized() or dist.get_rank() == 0:
            out = out + self.extra(h)
        return out


class Tied(nn.Module):
    """Tied weights, as a language model's embedding and head share theirs: `out` reuses
    `inp`'s weight. fully_shard refuses a parameter managed by two groups, so gradcli leaves
    the tied blocks to the root's group."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 10, bias=False)
        self.mid = nn.Linear(10, 8)
        self.out = nn.Linear(8, 10, bias=False)
        self.out.weight = self.inp.weight

    def forward(self, x):
        return self.out(torch.tanh(self.mid(torch.tanh(self.inp(x)))))
