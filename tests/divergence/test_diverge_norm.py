"""The fingerprint's norm of a float32 tensor (divergence/fingerprint.py: a float32 dot per block,
the blocks' sums in float64) against torch's norm of the tensor in float64. The band's floor is
16 float32 unit roundoffs of the value (band.py), 9.5e-7 relative: the norm must be well inside
it, or rounding in the fingerprint itself would move a run's distance in bands."""

from __future__ import annotations

import math

import pytest
import torch

from gradcli.divergence.band import FACTOR, UNIT
from gradcli.divergence.fingerprint import BLOCK, BLOCKED_FROM, summaries

#: A tenth of the band's floor.
WITHIN = FACTOR * UNIT["float32"] / 10


def exact(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t.double()))


@pytest.mark.parametrize("n", [1, 123, BLOCK, BLOCKED_FROM - 1, BLOCKED_FROM, BLOCKED_FROM + 1, 5 * BLOCKED_FROM + 7,
                               1_000_000, 3_000_001])
@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e4])
def test_the_blocked_norm_is_within_a_tenth_of_the_bands_floor(n, scale):
    generator = torch.Generator().manual_seed(n)
    t = (torch.randn(n, generator=generator) + 0.3) * scale  # (an offset: every square adds up, none cancels)
    [[norm, _]] = summaries([t])
    assert abs(norm - exact(t)) <= WITHIN * exact(t)


def test_a_weight_shaped_tensor_and_a_strided_view_read_the_same_elements():
    t = torch.randn(1024, 1000, generator=torch.Generator().manual_seed(0))
    strided = t[:, ::3]
    norms = [n for n, _ in summaries([t, strided])]
    assert norms[0] == pytest.approx(exact(t), rel=WITHIN) and norms[1] == pytest.approx(exact(strided), rel=WITHIN)


def test_squares_past_float32_and_near_its_underflow_are_taken_exactly():
    huge = torch.full((BLOCKED_FROM,), 3e19)  # each square is past float32's largest (3.4e38): the blocks' dots overflow
    tiny = torch.full((BLOCKED_FROM,), 1e-25)  # each square is below float32's smallest (1.4e-45)
    [[big, _], [small, _], [zero, _]] = summaries([huge, tiny, torch.zeros(10)])
    assert big == pytest.approx(exact(huge), rel=1e-12) and math.isfinite(big)
    assert small == pytest.approx(exact(tiny), rel=1e-12) and small > 0
    assert zero == 0.0


def test_nan_and_inf_stay_what_torch_says():
    t = torch.randn(BLOCKED_FROM * 3)
    t[5] = math.inf
    u = torch.randn(10)
    u[3] = math.nan
    [[inf, _], [nan, _]] = summaries([t, u])
    assert inf == math.inf and math.isnan(nan)


def test_float64_tensors_keep_torchs_float64_norm():
    t = torch.randn(10_000, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    assert summaries([t])[0][0] == float(torch.linalg.vector_norm(t))
