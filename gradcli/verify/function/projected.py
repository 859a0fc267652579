"""check-function past JACOBIAN_MAX: every input element compared, through one weighted sum.

Past JACOBIAN_MAX elements the Jacobian is not built, and gradcheck's fast mode projects it
on one random pair of vectors: a backward wrong at one element among 1,600 (sin with one
derivative 5 % off) moves that single number by less than its tolerance, and passed. Here
the gradient of L = sum(w * out), w the seeded output weights of jacobian.py, comes from one
run of the user's backward and is compared element by element with L's central differences
(two forwards per input element): a wrong entry shows at its element, its w being nonzero.
Kinks and a forward rounding to float32 are set apart as for the full Jacobian.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..finite_differences.jacobian import InputCheck, analytical, compare_blocks, flat_output, numerical, output_weights
from .kinks import one_sided_kinks
from ..finite_differences.precision import coarse_grid_expected

#: Input elements up to which L's differences are taken (two forwards each).
PROJECTED_MAX = 4_000
#: How a compared entry's output is named.
WEIGHTED = "sum(w*out)"


def projected_checks(fn: Any, tensors: dict[str, torch.Tensor], seed: int,
                     out_size: int) -> tuple[list[InputCheck], int, str]:
    """Per input, backward's gradient of sum(w * out) against central differences (a block
    of one row), with how many entries were taken over a longer step and on which grid."""
    weights = output_weights(out_size, seed)

    def weighted(values: dict[str, torch.Tensor]) -> torch.Tensor:
        return (flat_output(fn, values).to(torch.float64) * weights).sum().reshape(1)

    got = analytical(weighted, tensors)
    expected = numerical(weighted, tensors)
    expected, coarse, grid = coarse_grid_expected(weighted, tensors, got, expected)
    checks = compare_blocks(got, expected, tensors, WEIGHTED, one_sided_kinks(weighted, tensors, got, expected))
    for check in checks:
        check.mismatches = [dataclasses.replace(m, output=WEIGHTED) for m in check.mismatches]
        check.kinks_shown = [dataclasses.replace(m, output=WEIGHTED) for m in check.kinks_shown]
    return checks, coarse, grid
