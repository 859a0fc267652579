"""graph/values.py's shortcuts against torch's own answer: the preview of a non-contiguous
tensor (read from its leading rows, not a copy of all of it) and the finiteness test (from
aminmax, not a bool per element)."""

from __future__ import annotations

import random

import pytest
import torch

from gradcli.graph.values import all_finite, preview


def shaped(rng: random.Random) -> torch.Tensor:
    """A tensor of 1-4 dims (sometimes empty), sometimes transposed or strided."""
    dims = rng.randint(1, 4)
    tensor = torch.randn(*[rng.randint(0 if rng.random() < 0.05 else 1, 6) for _ in range(dims)])
    if dims > 1 and rng.random() < 0.5:
        tensor = tensor.transpose(0, dims - 1)
    if tensor.dim() and tensor.shape[0] > 1 and rng.random() < 0.3:
        tensor = tensor[::2]
    return tensor


def test_preview_is_the_first_elements_in_row_major_order():
    rng = random.Random(0)
    for _ in range(500):
        tensor, count = shaped(rng), rng.choice([1, 2, 6, 10, 50])
        expected = [tensor.item()] if tensor.numel() == 1 else tensor.reshape(-1)[:count].tolist()
        assert preview(tensor, count) == expected, (tensor.shape, tensor.stride(), count)


def test_preview_of_a_transposed_large_weight():
    weight = torch.randn(3000, 700)
    assert preview(weight.t()) == weight.t().reshape(-1)[:6].tolist()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_all_finite_agrees_with_isfinite_wherever_nan_or_inf_sits(dtype):
    rng = random.Random(1)
    for _ in range(150):
        size = rng.choice([1, 7, 16, 17, 64, 65, 1000, rng.randint(1, 50_000)])
        tensor = torch.randn(size, dtype=dtype) * rng.choice([1e-3, 1.0, 1e3])
        for _ in range(rng.randint(0, 2)):
            tensor[rng.randrange(size)] = rng.choice([float("nan"), float("inf"), -float("inf")])
        if size > 4 and rng.random() < 0.3:
            tensor = tensor[::3]
        assert all_finite(tensor) == bool(torch.isfinite(tensor).all())


def test_all_finite_of_empty_integer_and_complex_tensors():
    assert all_finite(torch.empty(0))
    assert all_finite(torch.arange(5))
    assert not all_finite(torch.tensor([1 + 1j, complex(float("nan"), 0)]))
    assert all_finite(torch.tensor([1 + 1j, 2j]))
