"""The seed of a run's random values, drawn in one place.

A run without --seed draws one from torch's global generator and reports it, so the run
can be repeated with `--seed N`.
"""

from __future__ import annotations


def draw_seed() -> int:
    """A fresh seed in [0, 2**31 - 1)."""
    import torch

    return int(torch.randint(0, 2**31 - 1, ()).item())
