"""Biases the loss cannot see: a shift of a layer's output that what follows removes.

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
"""

from __future__ import annotations

import math

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
