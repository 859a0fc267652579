"""Loss functions as a training script writes them, for `--loss examples/lm/losses.py:NAME`.

gradcli calls NAME(out, **vars): `out` is the model's output as it returned it, and the other
parameters are bound by name to forward's inputs and to --var values (here `ids`).
"""

import torch.nn.functional as F


def shifted_cross_entropy(out, ids):
    """Next-token prediction: the logits at t predict the token at t + 1."""
    vocab = out.shape[-1]
    return F.cross_entropy(out[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))


def padded_cross_entropy(out, ids, pad=0):
    """The same, with padding tokens (id `pad`) left out of the loss."""
    vocab = out.shape[-1]
    return F.cross_entropy(out[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1), ignore_index=pad)
