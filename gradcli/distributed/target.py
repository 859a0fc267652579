"""The user's model, its inputs and its loss, made the way `grads` makes them (targets/: the
loader, --init, inputs bound by forward's signature, --loss in gradcli's language), for the
one-process reference (the whole batch) or for one rank (its shard of the batch).

Every rank and the reference seed torch alike, so they build the same initial weights and the
same whole batch; a rank then keeps the samples a DistributedSampler (shuffle off) gives it:
rank r of N takes samples r, r+N, r+2N, ... of every --var tensor (split along dim 0). With
gradient accumulation (`--accumulate K`) a rank's shard is K consecutive micro-batches, as a
DataLoader over that sampler hands them out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from ..errors import UsageError
from ..targets.model import model_run, scalar_loss
from ..targets.spec import ModelSpec
from .setup import Setup


#: The name --loss reads the accumulation's micro-step count by.
ACCUMULATE = "accumulate"


@dataclass
class Micro:
    """One forward and backward: its arguments, and the loss of its output."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    loss_fn: Callable[[Any], torch.Tensor]


@dataclass
class Built:
    """The model and its micro-batches (one: the rank's shard, or the whole batch)."""

    model: torch.nn.Module
    micro: list[Micro]
    where: str
    found: str
    batch: int  # the whole batch's size (dim 0 of the --var tensors)


def build(setup: Setup, rank: int | None = None, world: int = 1) -> Built:
    """`setup`'s target made on this process; `rank` None: the whole batch in one step (the
    reference), else the rank's shard in `setup.accumulate` micro-batches."""
    with model_run(one_process(setup), purpose="--ddp and --fsdp run a model with parameters on each rank") as run:
        pass  # made under the seed; each rank's shard is cut from the same whole batch below
    batch = batch_size(run.tensors, world, setup.accumulate)
    steps = 1 if rank is None else setup.accumulate
    micro = []
    for step in range(steps):
        part = {name: _micro(_shard(t, rank, world), step, steps) for name, t in run.tensors.items()}
        micro.append(_step(run, part, steps))
    return Built(run.model, micro, run.where, run.found, batch)


def one_process(setup: Setup) -> ModelSpec:
    """The model options as one process makes the model: on the CPU, where the seed draws the
    same weights and batch for every rank and the reference (a rank moves its copy after)."""
    return replace(setup.model, device="cpu")


def _step(run: Any, part: dict[str, torch.Tensor], steps: int) -> Micro:
    swap = {id(t): part[name] for name, t in run.tensors.items()}
    args = tuple(swap.get(id(a), a) for a in run.args)
    kwargs = {k: swap.get(id(v), v) for k, v in run.kwargs.items()}
    # The loss may divide by the micro-steps as the training loop does (`... / accumulate`): K
    # on the ranks, 1 on the one process, whose single step on the whole batch they stand for.
    values = {ACCUMULATE: torch.tensor(float(steps)), **part}

    def loss_fn(output: Any) -> torch.Tensor:
        return scalar_loss(run.loss_of(output, values))  # grads' own refusal of a loss that is not one number

    return Micro(args, kwargs, loss_fn)


def batch_size(tensors: dict[str, torch.Tensor], world: int, accumulate: int = 1) -> int:
    """The batch the ranks share: dim 0 of the --var tensors, which must agree and divide
    evenly into `world` shards of `accumulate` micro-batches each."""
    sizes = {name: t.shape[0] for name, t in tensors.items() if t.dim() >= 1}
    if not sizes:
        raise UsageError("--ddp and --fsdp split the batch between ranks, and no --var tensor has a batch dimension",
                         hint="give the inputs with a batch dimension first, e.g. --var 'x=randn(16, 8)'")
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{n}: {s}" for n, s in sizes.items())
        raise UsageError(f"the --var tensors disagree on the batch size (dim 0): {listed}",
                         hint="each rank takes its share of every --var tensor along dim 0, so they must have the same length")
    batch = next(iter(sizes.values()))
    if batch % world:
        raise UsageError(
            f"a batch of {batch} does not split evenly between {world} ranks",
            hint=f"DistributedSampler would pad it with repeated samples, which changes the gradient; give a multiple of {world}",
        )
    if (batch // world) % accumulate:
        raise UsageError(
            f"each rank's {batch // world} samples do not split evenly into {accumulate} micro-batches (--accumulate {accumulate})",
            hint=f"a last, shorter micro-batch weighs its samples differently; give a batch that is a multiple of {world * accumulate}",
        )
    return batch


def _shard(tensor: torch.Tensor, rank: int | None, world: int) -> torch.Tensor:
    if rank is None or tensor.dim() == 0:
        return tensor
    return tensor.detach()[rank::world].clone().requires_grad_(tensor.requires_grad)


def _micro(tensor: torch.Tensor, step: int, steps: int) -> torch.Tensor:
    if steps == 1 or tensor.dim() == 0:
        return tensor
    size = tensor.shape[0] // steps
    return tensor.detach()[step * size:(step + 1) * size].clone().requires_grad_(tensor.requires_grad)
