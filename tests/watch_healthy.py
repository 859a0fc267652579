"""Healthy training loops that do on purpose what a careless monitor would flag: the corpus of
tests/watcher/test_watch_healthy.py (and of bench/watch_calibrate.py's healthy grid).

Each `RUNS[name](steps, seed)` builds its models from the seed, trains them on data drawn from
its own generator, and returns the modules whose state (parameters and buffers) the test
compares bit for bit with the same loop run under gradcli. Kept tiny: a few hundred parameters
to a few tens of thousands, batch 8-32, so that the corpus runs in seconds.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F


def _data(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(10_000 * seed + step)


class MLP(nn.Module):
    def __init__(self, inputs: int = 8, width: int = 32, outputs: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(inputs, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.head = nn.Linear(width, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def _classes(g: torch.Generator, batch: int = 32, inputs: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(batch, inputs, generator=g)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()


class CNN(nn.Module):
    """BatchNorm and dropout; `bias=True` puts a bias in front of each BatchNorm (a shift the
    normalisation removes: its gradient is zero up to rounding)."""

    def __init__(self, bias: bool = False, classes: int = 4) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1, bias=bias), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=bias), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(16, 16, bias=bias)
        self.bn = nn.BatchNorm1d(16)
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x).flatten(1)
        return self.head(self.dropout(F.relu(self.bn(self.fc(h)))))


def _images(g: torch.Generator, batch: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(batch, 1, 12, 12, generator=g)
    return x, (x[:, 0, :6].mean(dim=(1, 2)) > 0).long() * 2 + (x[:, 0, :, :6].mean(dim=(1, 2)) > 0).long()


class TinyLM(nn.Module):
    """A two-block Transformer language model; `tied`: the output layer is the embedding."""

    def __init__(self, vocab: int = 48, width: int = 32, context: int = 16, tied: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.randn(context, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, 4, 64, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab, bias=False)
        if tied:
            self.out.weight = self.embed.weight
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        h = self.blocks(self.embed(tokens) + self.position[:n], mask=self.mask[:n, :n], is_causal=True)
        return self.out(self.norm(h))


def _tokens(g: torch.Generator, batch: int = 8, context: int = 16, vocab: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    tokens = (start + torch.arange(context + 1) * torch.randint(1, 3, (batch, 1), generator=g)) % vocab
    return tokens[:, :-1], tokens[:, 1:]


def _lm_loss(model: nn.Module, g: torch.Generator) -> torch.Tensor:
    x, y = _tokens(g)
    out = model(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


# -- the runs ----------------------------------------------------------------------------------
def accumulation(steps: int, seed: int) -> list[nn.Module]:
    """Four micro-batches per step, zero_grad() after the step."""
    torch.manual_seed(seed)
    model = MLP()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        for micro in range(4):
            x, y = _classes(_data(seed, 4 * step + micro), batch=8)
            (F.cross_entropy(model(x), y) / 4).backward()
        optimizer.step()
        optimizer.zero_grad()
    return [model]


def frozen_batchnorm(steps: int, seed: int) -> list[nn.Module]:
    """Fine-tuning with BatchNorm frozen: the model in train mode, its BatchNorms in eval mode
    with their affine parameters left out of training."""
    torch.manual_seed(seed)
    model = CNN()
    for step in range(10):  # "pre-training", unwatched alike on both sides
        x, _ = _images(_data(seed + 100, step))
        model(x)
    model.train()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.eval()
            module.requires_grad_(False)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.02, momentum=0.9)
    for step in range(steps):
        x, y = _images(_data(seed, step))
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return [model]


class LoRALinear(nn.Module):
    """A frozen Linear plus a trained low-rank update B·A (B starts at zero, as LoRA's)."""

    def __init__(self, base: nn.Linear, rank: int = 4) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + x @ self.a.t() @ self.b.t()


def frozen_backbone(steps: int, seed: int) -> list[nn.Module]:
    """A frozen backbone with a LoRA adapter on one layer, and a new head: only those train."""
    torch.manual_seed(seed)
    model = MLP()
    model.body.requires_grad_(False)
    model.body[2] = LoRALinear(model.body[2])
    model.head = nn.Linear(32, 3)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    for step in range(steps):
        x, y = _classes(_data(seed, step))
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return [model]


def ema_teacher(steps: int, seed: int) -> list[nn.Module]:
    """A student trained against its EMA teacher (AveragedModel, updated after each step)."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    torch.manual_seed(seed)
    student = MLP()
    teacher = AveragedModel(student, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    optimizer = torch.optim.Adam(student.parameters(), lr=3e-3)
    for step in range(steps):
        x, y = _classes(_data(seed, step))
        out = student(x)
        with torch.no_grad():
            target = F.softmax(teacher(x), dim=1)
        loss = F.cross_entropy(out, y) + F.kl_div(F.log_softmax(out, dim=1), target, reduction="batchmean")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        teacher.update_parameters(student)
    return [student, teacher]


def _generator() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))


class Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def wgan_clamp(steps: int, seed: int) -> list[nn.Module]:
    """WGAN: five critic steps per generator step, the critic's weights clamped after each."""
    torch.manual_seed(seed)
    generator, critic = _generator(), Critic()
    opt_g = torch.optim.RMSprop(generator.parameters(), lr=5e-4)
    opt_c = torch.optim.RMSprop(critic.parameters(), lr=5e-4)
    for step in range(steps):
        for inner in range(5):
            g = _data(seed, 5 * step + inner)
            real = torch.randn(32, 2, generator=g) * 0.5 + torch.tensor([2.0, -1.0])
            fake = generator(torch.randn(32, 4, generator=g)).detach()
            opt_c.zero_grad()
            (critic(fake).mean() - critic(real).mean()).backward()
            opt_c.step()
            for p in critic.parameters():
                p.data.clamp_(-0.01, 0.01)
        opt_g.zero_grad()
        (-critic(generator(torch.randn(32, 4, generator=_data(seed + 1, step))))).mean().backward()
        opt_g.step()
    return [generator, critic]


def tied_weights(steps: int, seed: int) -> list[nn.Module]:
    """A language model whose output layer is its embedding (one parameter, two uses)."""
    torch.manual_seed(seed)
    model = TinyLM(tied=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(steps):
        optimizer.zero_grad()
        _lm_loss(model, _data(seed, step)).backward()
        optimizer.step()
    return [model]


def warmup_cosine(steps: int, seed: int) -> list[nn.Module]:
    """Linear warmup (LambdaLR) then cosine annealing run to its end (the rate reaches 0)."""
    torch.manual_seed(seed)
    model = MLP()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    warm = max(1, steps // 5)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm))
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps - warm)
    schedule = torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, cosine], milestones=[warm])
    for step in range(steps):
        x, y = _classes(_data(seed, step))
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        schedule.step()
    return [model]


def cosine_to_zero(steps: int, seed: int) -> list[nn.Module]:
    """SGD with CosineAnnealingLR over exactly the run's steps: the last updates are ~0."""
    torch.manual_seed(seed)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    for step in range(steps):
        x, y = _classes(_data(seed, step))
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        schedule.step()
    return [model]


def dcgan(steps: int, seed: int) -> list[nn.Module]:
    """A GAN's two optimizers: the generator's loss backpropagates through the discriminator
    onto gradients its own step used (its zero_grad() resets them before its next step)."""
    torch.manual_seed(seed)
    generator = _generator()
    discriminator = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    for step in range(steps):
        g = _data(seed, step)
        real = torch.randn(32, 2, generator=g) * 0.5 + torch.tensor([2.0, -1.0])
        fake = generator(torch.randn(32, 4, generator=g))
        discriminator.zero_grad()
        loss_d = bce(discriminator(real), torch.ones(32, 1)) + bce(discriminator(fake.detach()), torch.zeros(32, 1))
        loss_d.backward()
        opt_d.step()
        generator.zero_grad()
        bce(discriminator(fake), torch.ones(32, 1)).backward()
        opt_g.step()
    return [generator, discriminator]


def transformer_lm(steps: int, seed: int) -> list[nn.Module]:
    """A small Transformer LM: AdamW with weight decay, warmup, gradient-norm clipping."""
    torch.manual_seed(seed)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
    for step in range(steps):
        optimizer.zero_grad()
        _lm_loss(model, _data(seed, step)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        warmup.step()
    return [model]


def _cnn(bias: bool) -> Callable[[int, int], list[nn.Module]]:
    def run(steps: int, seed: int) -> list[nn.Module]:
        torch.manual_seed(seed)
        model = CNN(bias=bias)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for step in range(steps):
            x, y = _images(_data(seed, step))
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        return [model]

    run.__doc__ = ("a CNN with BatchNorm and dropout" if not bias else
                   "the same CNN with a bias in each Conv2d and Linear in front of a BatchNorm")
    return run


def gpt2(steps: int, seed: int) -> list[nn.Module]:
    """transformers' GPT-2 from its config (2 layers, width 64): its own loss, AdamW."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32,
                                       bos_token_id=0, eos_token_id=0))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(steps):
        tokens = torch.randint(0, 128, (4, 16), generator=_data(seed, step))
        optimizer.zero_grad()
        model(input_ids=tokens, labels=tokens).loss.backward()
        optimizer.step()
    return [model]


def resnet18(steps: int, seed: int) -> list[nn.Module]:
    """torchvision's ResNet-18 (10 classes, 4x3x32x32), SGD with momentum."""
    import torchvision

    torch.manual_seed(seed)
    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step in range(steps):
        g = _data(seed, step)
        x, y = torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return [model]


RUNS: dict[str, Callable[[int, int], list[nn.Module]]] = {
    "accumulation": accumulation,
    "frozen_batchnorm": frozen_batchnorm,
    "frozen_backbone": frozen_backbone,
    "ema_teacher": ema_teacher,
    "wgan_clamp": wgan_clamp,
    "tied_weights": tied_weights,
    "warmup_cosine": warmup_cosine,
    "cosine_to_zero": cosine_to_zero,
    "dcgan": dcgan,
    "transformer_lm": transformer_lm,
    "cnn": _cnn(bias=False),
    "bias_before_batchnorm": _cnn(bias=True),
    "gpt2": gpt2,
    "resnet18": resnet18,
}
