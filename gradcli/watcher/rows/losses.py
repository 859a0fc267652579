"""The step's loss as torch's graph shows it at backward: enough to compute each row's loss from
the model's output, and the loss again at other weights (rows/previous.py).

`LossNotes` is told of each backward like a detector (detectors/__init__.py) and reports nothing:
it notes which loss the root is (cross_entropy/nll_loss, mse_loss, l1_loss,
binary_cross_entropy_with_logits, or a hand-written `((out - y) ** 2).mean()`), with its target
and reduction, referenced, not copied (backward frees the saved tensors). A few microseconds a
backward.
"""

from __future__ import annotations

from typing import Any

import torch

from ...graph.nodes import inputs_of

#: Losses noted at most (backward calls between two applied steps: a GradScaler's skipped steps add up).
KEPT = 64

LOSSES = {"NllLossBackward0", "MseLossBackward0", "L1LossBackward0", "BinaryCrossEntropyWithLogitsBackward0"}


class LossNotes:
    """At each backward: the loss its root is (graph node, target, reduction), or None."""

    def __init__(self) -> None:
        self.notes: list[dict[str, Any] | None] = []
        self.flagged = 0  # flagged steps whose rows were computed

    # the detector protocol (detectors/__init__.py) written out: rows/ does not import detectors/
    def backward(self, run: Any, roots: list[torch.Tensor]) -> None:
        self.notes = [*self.notes[-KEPT:], *(loss_note(root) for root in roots)]

    def backward_done(self, run: Any) -> None:
        return None

    def check(self, step: Any) -> list[Any]:
        return []

    def applied(self, step: Any) -> None:
        self.notes = []

    def end(self, run: Any) -> list[Any]:
        return []


def loss_note(root: torch.Tensor) -> dict[str, Any] | None:
    node = getattr(root, "grad_fn", None)
    while node is not None and node.name() in ("MulBackward0", "DivBackward0") and inputs_of(node):
        node = inputs_of(node)[0]  # a loss divided by the accumulation steps
    if node is not None and node.name() == "MeanBackward0":
        return _hand_written_mse(node)
    if node is None or node.name() not in LOSSES:
        return None
    name = node.name()
    note = {"node": name, "target": node._saved_target, "reduction": node._saved_reduction}
    if name == "NllLossBackward0":
        inner = inputs_of(node)[0]
        note["log_softmax"] = inner is not None and inner.name() == "LogSoftmaxBackward0"
        index = int(node._saved_ignore_index)
        note["ignore_index"] = index - (1 << 64) if index >= 1 << 63 else index  # torch reads it back unsigned
        note["weight"] = node._saved_weight
    elif name == "BinaryCrossEntropyWithLogitsBackward0":
        note["weight"], note["pos_weight"] = node._saved_weight, node._saved_pos_weight
    return note


def _hand_written_mse(mean: Any) -> dict[str, Any] | None:
    """`((out - y) ** 2).mean()`: the target is the output less the residual the power saved
    (`target` is filled from the replayed output, which is the step's own)."""
    power = inputs_of(mean)[0]
    if power is None or power.name() != "PowBackward0" or power._saved_exponent != 2:
        return None
    sub = inputs_of(power)[0]
    if sub is None or sub.name() != "SubBackward0" or inputs_of(sub)[1] is not None:  # y needs no grad
        return None
    return {"node": "MseLossBackward0", "residual": power._saved_self, "target": None, "reduction": 1}


def row_losses(out: torch.Tensor, note: dict[str, Any] | None, n: int) -> list[float] | None:
    """Each row's own loss (its elements' mean), from the output and the loss noted at backward."""
    if note is None:
        return None
    functional = torch.nn.functional
    target = note["target"]
    out = out.float()
    with torch.no_grad():
        if note["node"] == "NllLossBackward0":
            classes = out.shape[-1] if out.dim() > 1 else 0
            if not classes or out.numel() // classes != target.numel():
                return None
            flat = out.reshape(-1, classes)
            flat = functional.log_softmax(flat, -1) if note["log_softmax"] else flat
            weight = note["weight"]
            each = functional.nll_loss(flat, target.reshape(-1), weight=weight, ignore_index=note["ignore_index"],
                                       reduction="none")
        elif out.numel() != target.numel():
            return None
        elif note["node"] == "MseLossBackward0":
            each = (out.reshape(target.shape) - target).pow(2)
        elif note["node"] == "L1LossBackward0":
            each = (out.reshape(target.shape) - target).abs()
        else:
            each = functional.binary_cross_entropy_with_logits(
                out.reshape(target.shape), target, weight=note["weight"], pos_weight=note["pos_weight"],
                reduction="none")
        if each.numel() % n:
            return None
        return each.reshape(n, -1).float().mean(1).tolist()


def loss_of(out: torch.Tensor, note: dict[str, Any]) -> torch.Tensor:
    """The noted loss, with its reduction, on an output (for the previous weights)."""
    functional = torch.nn.functional
    reduction = {0: "none", 1: "mean", 2: "sum"}[int(note["reduction"])]
    target = note["target"]
    out = out.float()
    if note["node"] == "NllLossBackward0":
        flat = out.reshape(-1, out.shape[-1])
        flat = functional.log_softmax(flat, -1) if note["log_softmax"] else flat
        loss = functional.nll_loss(flat, target.reshape(-1), weight=note["weight"], ignore_index=note["ignore_index"],
                                   reduction=reduction)
    elif note["node"] == "MseLossBackward0":
        loss = functional.mse_loss(out.reshape(target.shape), target, reduction=reduction)
    elif note["node"] == "L1LossBackward0":
        loss = functional.l1_loss(out.reshape(target.shape), target, reduction=reduction)
    else:
        loss = functional.binary_cross_entropy_with_logits(out.reshape(target.shape), target, weight=note["weight"],
                                                           pos_weight=note["pos_weight"], reduction=reduction)
    return loss.sum()
