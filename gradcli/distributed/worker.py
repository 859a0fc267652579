"""One rank's run: the user's model built as on every rank, wrapped in DDP or FSDP2, one forward
and backward on this rank's shard, and the gradients gathered, returned as plain data.

What a rank reports (`RankRun`) is what the parent compares and explains:
- each parameter's gradient after reduction (DDP: `.grad`, already averaged; FSDP2: the DTensor
  gathered with `full_tensor()`), serialised with torch.save so it crosses processes as bytes;
- the total gradient norm as a user would log it on this rank: over the full (gathered)
  gradients, and over this rank's local shards only (FSDP2's `p.grad.to_local()`: a norm that
  sees 1/N of the elements);
- the parameters that get no gradient on this rank (under DDP found before backward, from the
  graph forward built), and DDP's own error when they make its next iteration fail;
- a digest of the initial weights (ranks that initialise differently disagree here) and the
  BatchNorm layers that normalise with this rank's statistics;
- with `--accumulate K`, the K micro-steps' mean loss (the first K-1 under no_sync), and with a
  step after backward (`--clip-grad-norm`, `--before-step`), what it did to this rank's shard.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from ..graph.nodes import walk
from ..targets.load import users_code
from . import syncbn
from .setup import Fix, Setup
from .step import StepEffect, run_step
from .target import Micro, build


@dataclass
class RankRun:
    """Plain data from one rank (picklable; tensors inside `blob`)."""

    rank: int
    loss: float
    blob: bytes  # torch.save({name: gradient or None}) of the reduced gradients
    full_norm: float  # ‖all gradients‖ over the gathered/reduced gradients
    shard_norm: float  # ‖all gradients‖ over this rank's local shards (FSDP2), = full_norm for DDP
    no_grad: list[str] = field(default_factory=list)  # parameters without a gradient on this rank
    ddp_error: str | None = None  # DDP's error on the next iteration, when it raised one
    skipped: str | None = None  # why the wrapped backward was not run (it would hang)
    init_digest: str = ""
    batchnorms: list[str] = field(default_factory=list)
    bytes_reduced: int = 0  # gradient bytes this rank sends through the all-reduce / reduce-scatter per step
    step: StepEffect | None = None  # what the step between backward and optimizer.step did to this rank's shard

    def gradients(self) -> dict[str, torch.Tensor | None]:
        return torch.load(io.BytesIO(self.blob), weights_only=True)


def job(setup: Setup) -> Any:
    """The job `Ranks.run` hands to every rank for `setup`."""
    return functools.partial(run_rank, setup)


def run_rank(setup: Setup, rank: int, world: int) -> RankRun:
    with warnings.catch_warnings():
        # XXX torch.distributed.nn.functional.all_reduce (syncbn.py) warns that it is deprecated;
        # its named successor in _functional_collectives is private and not differentiable.
        warnings.simplefilter("ignore", FutureWarning)
        return _run_rank(setup, rank, world)


def _run_rank(setup: Setup, rank: int, world: int) -> RankRun:
    import torch.distributed as dist

    built = build(setup, rank, world)
    device = _device(setup)
    model = built.model.to(device)
    micro = [Micro(_to(m.args, device), _to(m.kwargs, device), m.loss_fn) for m in built.micro]
    digest = _digest(model)
    if Fix.BROADCAST in setup.fixes:
        with torch.no_grad():
            for tensor in (*model.parameters(), *model.buffers()):
                dist.broadcast(tensor.data, 0)
    if Fix.SYNC_BATCHNORM in setup.fixes:
        model = syncbn.convert(model, setup.device)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    run = RankRun(rank, math.nan, b"", math.nan, math.nan, init_digest=digest, batchnorms=syncbn.batchnorms(model))
    find_unused = Fix.FIND_UNUSED in setup.fixes
    wrapped = _wrap(model, setup, world, find_unused)
    torch.manual_seed(setup.seed)
    everyone: list[Any] = [[]] * world
    losses = []
    for k, step in enumerate(micro):
        synced = k == len(micro) - 1  # gradient accumulation: only the last micro-step reduces
        with _sync(wrapped, setup, synced):
            with users_code(built.where):
                loss = _loss(wrapped, step, setup, world)
            if setup.wrap == "ddp" and synced:
                # Before backward, from the graph forward built (as find_unused_parameters does): a
                # bucket holding a parameter used on one rank and not on another is all-reduced by
                # some ranks only, and the others would wait for it forever. Not run then.
                run.no_grad = _unreached(loss, model)
                everyone = [None] * world
                dist.all_gather_object(everyone, run.no_grad)
                if not find_unused and any(e != everyone[0] for e in everyone):
                    run.skipped = "unused-on-some-ranks"
                    run.blob = _blob({n: None for n in names})
                    return run
            with users_code(built.where):
                loss.backward()
        losses.append(float(loss.detach()))
    if setup.wrap == "fsdp":
        params = dict(model.named_parameters())
        run.no_grad = [n for n in names if params[n].grad is None]
    run.loss = sum(losses) / len(losses)
    run.step = run_step(model, setup)
    grads, shard_sq, run.bytes_reduced = _gather(model, names, setup.wrap, world)
    full = [g for g in grads.values() if g is not None]
    run.full_norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in full))
    run.shard_norm = math.sqrt(shard_sq)
    run.blob = _blob(grads)
    if setup.wrap == "ddp" and any(everyone) and not find_unused:  # the same unused parameters on every rank
        run.ddp_error = _next_iteration_error(wrapped, micro[0], setup, world)
    return run


def _sync(wrapped: Any, setup: Setup, synced: bool) -> Any:
    """A micro-step that accumulates without reducing: DDP's no_sync(), FSDP2's
    set_requires_gradient_sync(False) (the last micro-step reduces what they accumulated)."""
    if setup.wrap == "fsdp":
        wrapped.set_requires_gradient_sync(synced)
        return contextlib.nullcontext()
    return contextlib.nullcontext() if synced else wrapped.no_sync()


def _loss(wrapped: Any, step: Micro, setup: Setup, world: int) -> torch.Tensor:
    loss = step.loss_fn(wrapped(*step.args, **step.kwargs))
    if Fix.SCALE_LOSS in setup.fixes:
        loss = loss * world
    if Fix.DIVIDE_BY_STEPS in setup.fixes:
        loss = loss / setup.accumulate
    return loss


def _unreached(loss: torch.Tensor, model: torch.nn.Module) -> list[str]:
    """The trainable parameters the loss's autograd graph does not reach (no gradient here)."""
    reached = {id(node.variable) for node in walk(loss.grad_fn) if hasattr(node, "variable")}
    return [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in reached]


def _wrap(model: torch.nn.Module, setup: Setup, world: int, find_unused: bool) -> Any:
    if setup.wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, find_unused_parameters=find_unused)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(_device(setup).type, (world,))
    # As training scripts shard: each top-level block its own unit, then the root. A block
    # holding a parameter tied to another block's (a language model's embedding and head) is
    # left to the root: fully_shard refuses a parameter managed by two groups.
    children = list(model.children())
    owners: dict[int, int] = {}
    for i, child in enumerate(children):
        for p in child.parameters():
            owners.setdefault(id(p), i)
    tied = {i for i, child in enumerate(children) for p in child.parameters() if owners[id(p)] != i}
    tied |= {owners[id(p)] for i in tied for p in children[i].parameters()}
    for i, child in enumerate(children):
        if i not in tied and any(p.requires_grad for p in child.parameters()):
            fully_shard(child, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _gather(model: torch.nn.Module, names: list[str], wrap: str, world: int) -> tuple[dict[str, Any], float, int]:
    """Every parameter's reduced gradient (gathered whole), ‖local shards‖², bytes reduced."""
    params = dict(model.named_parameters())
    grads: dict[str, Any] = {}
    shard_sq = 0.0
    sent = 0
    for name in names:
        g = params[name].grad
        if g is None:
            grads[name] = None
            continue
        if wrap == "fsdp":
            local = g.to_local()
            shard_sq += float(local.double().pow(2).sum())
            sent += local.numel() * local.element_size() * world  # reduce-scatter sends the whole gradient
            grads[name] = g.full_tensor().detach().cpu().clone()
        else:
            shard_sq += float(g.double().pow(2).sum())
            sent += g.numel() * g.element_size()
            grads[name] = g.detach().cpu().clone()
    return grads, shard_sq, sent


def _next_iteration_error(wrapped: Any, step: Micro, setup: Setup, world: int) -> str | None:
    """DDP's own words when a parameter went without a gradient: its next forward raises."""
    try:
        _loss(wrapped, step, setup, world)
    except RuntimeError as err:
        return str(err).strip()
    return None


def _digest(model: torch.nn.Module) -> str:
    """A fingerprint of the initial weights (each parameter's sum and sum of |.|, in float64)."""
    h = hashlib.sha256()
    with torch.no_grad():
        for p in model.parameters():
            t = p.detach().double()
            h.update(repr((t.sum().item(), t.abs().sum().item())).encode())
    return h.hexdigest()[:16]


def _blob(grads: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(grads, buffer)
    return buffer.getvalue()


def _device(setup: Setup) -> torch.device:
    if setup.device.startswith("cuda"):
        import os

        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device(setup.device)


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple):
        return tuple(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    return value
