"""Gradient health of a model: is anything reaching every parameter, and is it sane?

`grads(model, *inputs, loss=...)` (run.py) runs one forward and backward, watched
(observe.py), and returns a GradsResult (result.py): one row per parameter in forward order
with its numbers (stats.py) and flags with reasons (reasons.py, verdicts.py, thresholds.py);
where a nan or inf began (nonfinite.py); optionally SGD steps on a copy (steps.py).
target.py runs it on `model.py:NAME` for the command line.

Nothing is imported here: the CLI reads thresholds.py's defaults without importing torch.
"""
