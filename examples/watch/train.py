"""A small training script with a fault to choose: what `gradcli watch` is shown and tested on.

    python examples/watch/train.py --fault log0 --at 12          # the run goes on with nan weights
    gradcli watch examples/watch/train.py --fault log0 --at 12   # stopped before step 12 is applied

Each fault is a thing that happens in real runs, switched on at step --at:
  log0       a hand-written binary cross-entropy, log(1 - p), on a batch that saturates the sigmoid
  sqrt0      a loss that is the norm of the error, sqrt(sum(e^2)), on a row the model gets exactly
  where      a guarded log(x * scale) behind torch.where, on a batch with a 0 feature
  half       a float16 model (model.half()) given an outlier batch: a Linear's gradient passes 65504
  inf_batch  a batch holding an inf
  lr         a learning rate that diverges (the loss grows until it overflows)
  custom     a custom autograd.Function whose backward divides by the row norm, on a zero row
  dead       a bad update sets fc1's bias to -1000: its ReLU is off for every input
  unused     a layer the model holds but never calls
  spike      one batch whose labels are 100x too large
  ramp       a learning rate multiplied by 1.25 every step from --at (a warmup that overshoots)
Models (--model): mlp (Adam), cnn (BatchNorm, dropout, SGD with momentum), lm (a small
Transformer language model: AdamW, warmup, gradient-norm clipping). Data comes from a
generator seeded per step, so the script computes the same steps every time.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable

import torch
from torch import nn

FAULTS = ("none", "log0", "sqrt0", "where", "half", "inf_batch", "lr", "custom", "dead", "unused", "spike", "ramp")
MODELS = ("mlp", "cnn", "lm")
#: The learning rate of the `lr` fault: SGD on this MLP diverges with it from the first steps.
LR_DIVERGING = 3.0


class RowNormalize(torch.autograd.Function):
    """x / ‖x‖ per row, the forward guarded against a zero row, the backward not."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        norm = x.norm(dim=1, keepdim=True)
        ctx.save_for_backward(x, norm)
        return x / norm.clamp_min(1e-12)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        x, norm = ctx.saved_tensors
        y = x / norm
        return (grad - y * (grad * y).sum(dim=1, keepdim=True)) / norm


class MLP(nn.Module):
    def __init__(self, fault: str = "none") -> None:
        super().__init__()
        self.fault = fault
        self.fc1 = nn.Linear(8, 32)
        self.act = nn.ReLU()
        self.proj = nn.Linear(32, 32)
        self.head = nn.Linear(32, 1)
        if fault in ("where", "custom"):
            self.scale = nn.Parameter(torch.ones(8))  # a learnt scale of each input feature
        if fault == "unused":
            self.spare = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fault == "where":  # a log-feature, guarded where the feature is not positive
            x = torch.where(x > 0, torch.log(x * self.scale), torch.zeros_like(x))
        if self.fault == "custom":  # each sample scaled to unit length
            x = RowNormalize.apply(x * self.scale)
        h = self.act(self.fc1(x))
        h = self.act(self.proj(h))
        return self.head(h)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # No bias before BatchNorm (as torchvision's models): BatchNorm subtracts the mean, so
        # such a bias gets a gradient of ~1e-9 and cannot learn (watch calls it VANISHING).
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.features(x).flatten(1)))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32, context: int = 16, hidden: int = 64,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        layer = nn.TransformerEncoderLayer(width, 4, hidden, dropout=dropout, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.position[: tokens.shape[1]]
        h = self.blocks(h, mask=self.mask[: tokens.shape[1], : tokens.shape[1]], is_causal=True)
        return self.out(self.norm(h))


def batch(model: str, fault: str, step: int, at: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    if model == "cnn":
        return torch.randn(16, 1, 12, 12, generator=g), torch.randint(0, 4, (16,), generator=g)
    if model == "lm":
        tokens = torch.randint(0, 64, (8, 17), generator=g)
        return tokens[:, :-1], tokens[:, 1:]
    x = torch.rand(32, 8, generator=g) + 0.1  # features in (0.1, 1.1)
    y = (x.sum(dim=1, keepdim=True) > 4.8).float() if fault == "log0" else x[:, :2].sum(dim=1, keepdim=True)
    if step == at:
        if fault == "log0":
            x = x * 1e4  # an unnormalised batch: the sigmoid saturates to exactly 1.0
        elif fault == "where":
            x[3, 2] = 0.0  # a missing value filled with 0
        elif fault == "half":
            x = x * 5.9e4  # an outlier batch, in float16 (its values still below 65504)
        elif fault == "inf_batch":
            x[5, 1] = float("inf")
        elif fault == "spike":
            y = y * 100
        elif fault == "custom":
            x[4] = 0.0  # an empty sample: a zero row for RowNormalize
    return x, y


def loss_of(model_name: str, fault: str, out: torch.Tensor, y: torch.Tensor, step: int, at: int) -> torch.Tensor:
    if model_name == "cnn":
        return nn.functional.cross_entropy(out, y)
    if model_name == "lm":
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    out = out.float()
    if fault == "log0":
        p = torch.sigmoid(out)
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
    if fault == "sqrt0":
        if step == at:
            y = y.clone()
            y[0] = out[0].detach()  # the model gets this row exactly right
        return torch.sqrt(((out - y) ** 2).sum(dim=1)).mean()
    return ((out - y) ** 2).mean()


def build(model_name: str = "mlp", fault: str = "none", seed: int = 0) -> tuple[nn.Module, Any, Any]:
    torch.manual_seed(seed)
    if model_name == "cnn":
        model: nn.Module = CNN()
        optimizer: Any = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        return model, optimizer, None
    if model_name == "lm":
        model = TinyLM()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))
        return model, optimizer, warmup
    model = MLP(fault)
    if fault == "half":
        model = model.half()
    if fault in ("lr", "half"):  # (Adam's eps=1e-8 is 0 in float16: plain SGD for the float16 model)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR_DIVERGING if fault == "lr" else 1e-2)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, optimizer, None


def train(model_name: str = "mlp", fault: str = "none", steps: int = 30, at: int = 10, seed: int = 0,
          before_step: Callable[[int, nn.Module, torch.Tensor], None] | None = None) -> nn.Module:
    """The loop. `before_step(step, model, loss)`, when given, runs after backward and before
    optimizer.step(): the tests read torch's own truth there, with no gradcli in the process."""
    model, optimizer, scheduler = build(model_name, fault, seed)
    model.train()
    for step in range(1, steps + 1):
        x, y = batch(model_name, fault, step, at)
        if fault == "ramp" and step >= at:
            for group in optimizer.param_groups:
                group["lr"] *= 1.25
        if fault == "half":
            x = x.half()
        optimizer.zero_grad()
        out = model(x)
        loss = loss_of(model_name, fault, out, y, step, at)
        loss.backward()
        if model_name == "lm":
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if before_step is not None:
            before_step(step, model, loss)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        if fault == "dead" and step == at - 1:  # a bad update, written by hand here
            with torch.no_grad():
                model.fc1.bias.fill_(-1000.0)
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="mlp")
    parser.add_argument("--fault", choices=FAULTS, default="none")
    parser.add_argument("--at", type=int, default=10, help="the step the fault happens at")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    model = train(args.model, args.fault, args.steps, args.at, args.seed)
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print(f"trained {args.model} for {args.steps} steps; weights {'finite' if finite else 'NOT finite'}")


if __name__ == "__main__":
    main()
