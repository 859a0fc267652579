"""A note, not a finding: biases whose gradient is a shift the loss removes (shifts.py), most
often a Conv2d or Linear with a bias in front of a BatchNorm.

health.py spares such a bias its dead and VANISHING verdicts; this says why, once per bias, in
the result's notes. Which biases feed a BatchNorm is read from the first backward's graph (the
batch-norm node's input is the layer's ConvolutionBackward0 or AddmmBackward0, whose bias is a
leaf among its inputs); the gradients are judged at the first check and at the health cadence,
from the norms the check read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ...graph.nodes import grad_fn_nodes
from ..found import Found
from ..shifts import SHIFTED, shifted
from . import CheckedStep, Detector

if TYPE_CHECKING:
    from ..session import Watch

#: Nodes between a layer and the BatchNorm it feeds that change no value (a Linear on [N, L, C]).
_VIEWS = ("ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0")


class ShiftedBias(Detector):
    def __init__(self) -> None:
        self.fed: set[int] | None = None  # id() of the biases whose layer's output feeds a BatchNorm
        self.noted: set[str] = set()

    def backward(self, run: "Watch", roots: list[torch.Tensor]) -> None:
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
    for node in grad_fn_nodes([getattr(r, "grad_fn", None) for r in roots]):
        if "BatchNorm" not in node.name() or not node.next_functions:
            continue
        layer = node.next_functions[0][0]
        while layer is not None and layer.name() in _VIEWS:
            layer = layer.next_functions[0][0]
        if layer is None or layer.name() not in ("ConvolutionBackward0", "AddmmBackward0"):
            continue
        for source, _ in layer.next_functions:
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
