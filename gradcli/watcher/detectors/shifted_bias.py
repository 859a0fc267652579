"""Biases the loss cannot see: a shift of a layer's output that what follows removes. Not a
finding: a note, once per bias, in the result's notes; health.py spares such a bias its dead and
VANISHING verdicts (by `shifted` below).

A Conv2d or Linear with a bias followed by BatchNorm in training mode: the normalisation
subtracts each channel's batch mean, so the loss does not depend on the bias and its gradient
is zero up to rounding. A WGAN critic's output bias: the loss is a difference of two means of
the critic's outputs, and the bias cancels exactly (its gradient is 0.0 at every step). Neither
is a training bug; the bias is only useless (`bias=False` would do), and saying it VANISHING or
dead, with exit status 1, is a false alarm on a healthy run.

Told apart from a dead or vanishing layer by the layer's weight: a ReLU layer switched off gets
an all-zero gradient at its output, so its weight's gradient is zero too, and a vanishing one
shrinks both; here the weight's gradient is of ordinary size while the bias's is not. A bias is
*shifted* when ‖grad bias‖ < SHIFTED · ‖grad weight‖ of the same module, the weight's finite and
non-zero. Measured (tests/watch_healthy.py's CNN with biases, seeds 0-2, 100 steps of SGD with
momentum): the biases in front of a BatchNorm have a ratio of at most 1.6e-5; the head's bias,
which nothing normalises, at least 0.066. SHIFTED = 1e-3 sits between them with a margin of 60
on each side, and it only spares a bias that health.py would otherwise call dead or VANISHING.

Which biases feed a BatchNorm (for the note's words) is read from the first backward's graph
(the batch-norm node's input is the layer's ConvolutionBackward0 or AddmmBackward0, whose bias
is a leaf among its inputs); the gradients are judged at the first check and at the health
cadence, from the norms the check read.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ...graph.nodes import inputs_of, walk
from .found import Found
from .protocol import CheckedStep, Detector, Run


#: ‖grad bias‖ / ‖grad weight‖ below which a bias's gradient is a shift the loss removes.
SHIFTED = 1e-3


def shifted(names: list[str], norms: list[float | None], among: list[str] | None = None) -> list[str]:
    """The biases (of `among`, default all) whose gradient is a cancelled shift: `<module>.bias`
    with a gradient below SHIFTED times its `<module>.weight`'s."""
    index = {name: i for i, name in enumerate(names)}
    found = []
    for name in names if among is None else among:
        module, _, leaf = name.rpartition(".")
        if leaf != "bias" or not module or name not in index:
            continue
        weight = index.get(module + ".weight")
        if weight is None:
            continue
        bias_norm, weight_norm = norms[index[name]], norms[weight]
        if (bias_norm is not None and weight_norm is not None and math.isfinite(weight_norm) and weight_norm > 0
                and bias_norm < SHIFTED * weight_norm):
            found.append(name)
    return found


#: Nodes between a layer and the BatchNorm it feeds that change no value (a Linear on [N, L, C]).
_VIEWS = ("ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0")


class ShiftedBias(Detector):
    def __init__(self) -> None:
        self.fed: set[int] | None = None  # id() of the biases whose layer's output feeds a BatchNorm
        self.noted: set[str] = set()

    def backward(self, run: Run, roots: list[torch.Tensor]) -> None:
        if self.fed is None:
            self.fed = batchnorm_fed(roots)

    def check(self, step: CheckedStep) -> list[Found]:
        every = step.run.options.health_every
        if step.reading is None or not (step.watched.checks == 1 or (every and step.watched.checks % every == 0)):
            return []
        new = [name for name in shifted(step.names, step.reading.norms) if name not in self.noted]
        if not new:
            return []
        self.noted.update(new)
        ids = {name: id(p) for p, name in zip(step.params, step.names)}
        fed = [name for name in new if ids[name] in (self.fed or set())]
        other = [name for name in new if name not in fed]
        if fed:
            step.run.result.notes.append(
                f"{_named(fed)}: {_bias(fed)} in front of a BatchNorm, whose normalisation removes any shift: "
                f"{_its(fed)} gradient is zero up to rounding (below {SHIFTED:g} of the weight's); bias=False would do")
        if other:
            step.run.result.notes.append(
                f"{_named(other)}: the loss does not change when {_bias(other, 'this bias', 'these biases')} "
                f"{'shifts' if len(other) == 1 else 'shift'} the layer's output (it cancels, as in a difference of "
                f"two means): {_its(other)} gradient is zero up to rounding (below {SHIFTED:g} of the weight's), so "
                "it never learns; bias=False would do")
        return []


def batchnorm_fed(roots: list[Any]) -> set[int]:
    """id() of every bias whose layer's output goes straight into a batch normalisation."""
    fed: set[int] = set()
    for node in walk([getattr(r, "grad_fn", None) for r in roots]):
        if "BatchNorm" not in node.name() or not inputs_of(node):
            continue
        layer = inputs_of(node)[0]
        while layer is not None and layer.name() in _VIEWS:
            layer = inputs_of(layer)[0]
        if layer is None or layer.name() not in ("ConvolutionBackward0", "AddmmBackward0"):
            continue
        for source in inputs_of(layer):
            variable = getattr(source, "variable", None)
            if variable is not None and variable.dim() == 1:
                fed.add(id(variable))
    return fed


def _named(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _bias(names: list[str], one: str = "a bias", many: str = "biases") -> str:
    return one if len(names) == 1 else many


def _its(names: list[str]) -> str:
    return "its" if len(names) == 1 else "their"
