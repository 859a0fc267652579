"""`memory` advises checkpointing a stack of layers in segments: a flat 16-layer Sequential
(torch.utils.checkpoint.checkpoint_sequential) and a ModuleList of 12 Transformer blocks (runs
of consecutive blocks). The truth is torch's own checkpoint_sequential over the same layers:
its gradients against the plain ones, and its saved bytes counted with saved_tensors_hooks as
the memory command counts them (each storage once; parameters and inputs not counted)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from torch.utils.checkpoint import checkpoint_sequential

from memory_truth import loss_and_saved_bytes

MODELS = '''
from torch import nn


def mlp16():
    layers = []
    for _ in range(8):
        layers += [nn.Linear(32, 32), nn.GELU()]
    return nn.Sequential(*layers)


class Blocks(nn.Module):
    def __init__(self, depth=12, width=16):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(width, 2, 32, dropout=0.0, batch_first=True) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)
'''


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "stacks.py"
    path.write_text(MODELS)
    spec = importlib.util.spec_from_file_location("stacks_truth", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def _truth(model, stack, x, segments, head=lambda out: out):
    """torch's plain run and its checkpoint_sequential run: losses, gradients, saved bytes."""
    own = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    params = list(model.parameters())
    plain_loss, plain_bytes = loss_and_saved_bytes(lambda: head(stack(x)).pow(2).mean(), own)
    plain = torch.autograd.grad(plain_loss, params)
    tried_loss, tried_bytes = loss_and_saved_bytes(
        lambda: head(checkpoint_sequential(stack, segments, x, use_reentrant=False)).pow(2).mean(), own)
    tried = torch.autograd.grad(tried_loss, params)
    return plain_bytes, tried_bytes, all(torch.equal(a, b) for a, b in zip(plain, tried))


def _segment_entry(cli, target, x_spec):
    result = cli("memory", target, "--var", f"x={x_spec}", "--loss", "out.pow(2).mean()", "--checkpoint", "1",
                 "--seed", "0", "--json")
    assert result.exit_code == 0, result.stderr
    entries = [c for c in json.loads(result.stdout)["checkpoint"] if c["segments"] is not None]
    assert len(entries) == 1
    return entries[0]


def test_a_flat_sequential_is_advised_checkpoint_sequential_with_torch_s_bytes_and_gradients(cli, models):
    path, module = models
    entry = _segment_entry(cli, f"{path}:mlp16", "randn(64, 32)")
    assert entry["module"] == "" and entry["module_class"] == "Sequential"
    assert 2 <= entry["segments"] <= 16
    torch.manual_seed(0)
    model = module.mlp16()
    x = torch.randn(64, 32)
    plain_bytes, tried_bytes, equal = _truth(model, model, x, entry["segments"])
    assert equal and entry["gradients_equal"] is equal and entry["agrees"]
    assert (entry["saved_bytes_before"], entry["saved_bytes_after"]) == (plain_bytes, tried_bytes)
    assert tried_bytes < plain_bytes


def test_a_module_list_of_12_transformer_blocks_is_advised_in_segments(cli, models):
    path, module = models
    entry = _segment_entry(cli, f"{path}:Blocks", "randn(2, 8, 16)")
    assert entry["module"] == "blocks" and entry["module_class"] == "ModuleList"
    torch.manual_seed(0)
    model = module.Blocks()
    x = torch.randn(2, 8, 16)
    stack = torch.nn.Sequential(*model.blocks)  # the same blocks, run as checkpoint_sequential runs them
    plain_bytes, tried_bytes, equal = _truth(model, stack, x, entry["segments"], head=model.head)
    assert equal and entry["gradients_equal"] is equal and entry["agrees"]
    assert (entry["saved_bytes_before"], entry["saved_bytes_after"]) == (plain_bytes, tried_bytes)
    assert tried_bytes < plain_bytes


def test_the_segment_count_is_around_the_square_root():
    from gradcli.footprint.segments import bounds, candidates

    assert candidates(16) == [3, 4, 5, 8] and candidates(12) == [2, 3, 4, 5, 8]
    for layers in (4, 12, 16):
        for segments in candidates(layers):
            runs = bounds(layers, segments)
            assert len(runs) == segments and runs[0][0] == 0 and runs[-1][1] == layers - 1
            assert all(b[0] == a[1] + 1 for a, b in zip(runs, runs[1:]))
