"""BatchNorm whose statistics are those of the whole batch across ranks, for CPU.

torch's `nn.SyncBatchNorm` is the fix for per-rank statistics, but it refuses CPU tensors
("SyncBatchNorm expected input tensor to be on GPU", and DDP: "SyncBatchNorm layers only work
with GPU modules"). Proving the cause on a CPU run needs the same arithmetic, so this module
computes it from differentiable all-reduces (`torch.distributed.nn.functional.all_reduce`,
whose backward all-reduces the gradient): the mean, then the variance about it (two passes,
as accurate as BatchNorm's own), over every rank's samples. On cuda the real SyncBatchNorm
is used (see `convert`).
"""

from __future__ import annotations

import torch
from torch import nn


class GlobalBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm{1,2,3}d with statistics over all ranks' samples (training mode)."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        from torch.distributed.nn.functional import all_reduce

        if not self.training:
            return super().forward(input)
        channels = input.shape[1]
        dims = [0, *range(2, input.dim())]
        shape = [1, channels] + [1] * (input.dim() - 2)
        count = all_reduce(torch.tensor([input.numel() / channels], dtype=input.dtype, device=input.device))
        mean = all_reduce(input.sum(dims)) / count
        centred = input - mean.view(shape)
        var = all_reduce(centred.pow(2).sum(dims)) / count
        out = centred * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                n = float(count)
                self.running_mean.mul_(1 - momentum).add_(mean.detach(), alpha=momentum)
                self.running_var.mul_(1 - momentum).add_(var.detach() * n / max(n - 1, 1), alpha=momentum)
        return out


def convert(module: nn.Module, device: str = "cpu") -> nn.Module:
    """`module` with every BatchNorm computing whole-batch statistics (names unchanged)."""
    if device.startswith("cuda"):
        return nn.SyncBatchNorm.convert_sync_batchnorm(module)
    return _convert(module)


def _convert(module: nn.Module) -> nn.Module:
    out = module
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(module, (GlobalBatchNorm, nn.SyncBatchNorm)):
        out = GlobalBatchNorm(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats)
        if module.affine:
            out.weight, out.bias = module.weight, module.bias
        if module.track_running_stats:
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
        out.training = module.training
    for name, child in module.named_children():
        out.add_module(name, _convert(child))
    return out


def batchnorms(module: nn.Module) -> list[str]:
    """The paths of the BatchNorm layers that normalise with per-rank statistics."""
    return [name for name, m in module.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and not isinstance(m, (GlobalBatchNorm, nn.SyncBatchNorm))]
