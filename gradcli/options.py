"""Numeric options checked before use: seeds and tolerances.

torch takes a seed as a 64-bit integer and raises a bare ValueError beyond it; a negative or
nan tolerance is accepted by every comparison and makes each of them fail (nothing is within
a tolerance of -1), which reads as a wrong gradient. Both are the user's input, so both are
refused here with an exit-2 message before any work.
"""

from __future__ import annotations

import math

from .errors import UsageError

#: The seeds torch's generators take: a signed 64-bit integer (`trace` seeds its starting
#: gradient with seed + 1, which stays within torch's unsigned 64-bit range).
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1


def checked_seed(seed: int | None) -> int | None:
    """`seed` itself, or a UsageError when torch's generators cannot take it."""
    if seed is not None and not SEED_MIN <= seed <= SEED_MAX:
        raise UsageError(
            f"--seed {seed} is outside the seeds torch takes (-2**63 to 2**63 - 1)",
            hint="any integer in that range repeats a run; e.g. --seed 0",
        )
    return seed


def checked_tolerance(name: str, value: float | None) -> float | None:
    """`value` itself, or a UsageError for a negative, nan or infinite tolerance."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise UsageError(
            f"--{name} {value} is not a tolerance: it must be a finite number >= 0",
            hint=f"e.g. --{name} 1e-6; 0 asks for exact agreement",
        )
    return value
