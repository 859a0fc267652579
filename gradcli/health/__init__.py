"""Gradient health of a model: is anything reaching every parameter, and is it sane?

`grads(model, *inputs, loss=...)` runs one forward and backward, watched (observe.py), and
returns a GradsResult (result.py): one row per parameter in forward order with its numbers
(stats.py) and flags with reasons (reasons.py, verdicts.py, thresholds.py); where a nan or
inf began (nonfinite.py); optionally SGD steps on a copy (steps.py).
"""

from .result import GradsResult
from .run import grads

__all__ = ["grads", "GradsResult"]
