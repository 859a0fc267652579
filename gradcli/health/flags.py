"""The flags `grads` puts on a parameter, in the order they are listed, and which fail.

A module of its own so that renderers can read the kinds without importing the result (which
renders itself for `str()`).
"""

from __future__ import annotations

from typing import Literal

Flag = Literal["NO GRAD", "ZERO", "NONFINITE", "VANISHING", "EXPLODING"]

#: Flags that fail `grads` (exit 1) always; the others only with --strict.
FAILING: frozenset[Flag] = frozenset({"NO GRAD", "NONFINITE"})
#: The order flags are listed in: the most definite first.
FLAG_ORDER: tuple[Flag, ...] = ("NONFINITE", "NO GRAD", "ZERO", "EXPLODING", "VANISHING")
