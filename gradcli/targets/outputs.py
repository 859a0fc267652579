"""From what the user's code returned to the one tensor backward starts from.

A tensor is `out`; a tuple or list gives `out`, `out_1`, `out_2`...; a dict (transformers'
ModelOutput is one) gives its keys, and a dataclass its fields.
Tensors nested one level or more deeper (an LSTM's `(output, (h_n, c_n))`) are named by their
path: `out_1_0`, `out_1_1`, or `state_0` under a dict's key `state`. Those are for `--loss` to
name; without `--loss` only the top level counts (an LSTM's `out` alone is its output).
With `--loss` (targets/loss.py: an expression, or the user's own loss function) the output is
reduced to the loss; an expression also reads the output as returned: `out.logits`, `out[0]`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from ..errors import UsageError


#: How deep nested tuples, lists and dicts are named (an LSTM's state is one level down).
NESTING = 4


class Outputs(dict):
    """The output's tensors by name; `nested` holds the names of those below the top level."""

    def __init__(self) -> None:
        super().__init__()
        self.nested: set[str] = set()

    def top_level(self) -> dict[str, Any]:
        return {name: t for name, t in self.items() if name not in self.nested}


def name_outputs(output: Any, where: str) -> Outputs:
    """The tensors of `output` by name."""
    import torch

    named = Outputs()
    if isinstance(output, torch.Tensor):
        named["out"] = output
        return named
    if isinstance(output, (tuple, list)):
        top = [("out" if i == 0 else f"out_{i}", f"out_{i}", v) for i, v in enumerate(output)]
    elif isinstance(output, dict):
        top = [(str(k), str(k), v) for k, v in output.items() if str(k).isidentifier()]
    elif dataclasses.is_dataclass(output) and not isinstance(output, type):
        top = [(f.name, f.name, getattr(output, f.name)) for f in dataclasses.fields(output)]
    else:
        top = []
    for name, path, value in top:
        if isinstance(value, torch.Tensor):
            named[name] = value
    for name, path, value in top:  # after the top level, so that a name there always wins
        _name_nested(value, path, named, NESTING - 1)
    if not named:
        raise UsageError(
            f"{where} returned a {type(output).__name__}, not a tensor: there is no graph to trace",
            hint="return the tensor (or a tuple or dict of tensors) that the loss is computed from",
        )
    return named


def _name_nested(value: Any, path: str, named: Outputs, depth: int) -> None:
    import torch

    if depth <= 0:
        return
    if isinstance(value, (tuple, list)):
        items = [(f"{path}_{j}", v) for j, v in enumerate(value)]
    elif isinstance(value, dict):
        items = [(f"{path}_{k}", v) for k, v in value.items() if f"{path}_{k}".isidentifier()]
    else:
        return
    for name, item in items:
        if isinstance(item, torch.Tensor) and name not in named:
            named[name] = item
            named.nested.add(name)
        else:
            _name_nested(item, name, named, depth - 1)


def loss_variables(loss: Any, library_dirs: Sequence[str | Path] = (), init: Sequence[str] = ()) -> list[str]:
    """The names --loss reads (a bad --loss is refused here, before forward runs)."""
    from .loss import as_loss

    made = as_loss(loss, init, library_dirs)
    return [] if made is None else made.names()


def reduce_output(
    outputs: dict[str, Any], inputs: dict[str, Any], loss: Any, library_dirs: Sequence[str | Path] = (),
    output: Any = None, init: Sequence[str] = (),
) -> tuple[Any, list[tuple[str, Any]]]:
    """(the tensor to differentiate, the loss's own bindings); `output` is the model's output
    as it returned it (for out.logits, out[0]; default: the named tensors)."""
    if loss is None:
        # Nested tensors (an LSTM's state) are for --loss to name, not candidates by default.
        outputs = outputs.top_level() if isinstance(outputs, Outputs) else outputs
        if len(outputs) == 1:
            return next(iter(outputs.values())), []
        names = ", ".join(outputs)
        # The hint offers only what has a gradient: an argmax's indices summed into a loss add nothing.
        floating = [n for n, t in outputs.items() if t.is_floating_point()] or list(outputs)
        combined = ", or combine them: --loss '" + " + ".join(f"{n}.sum()" for n in floating) + "'"
        raise UsageError(
            f"the output holds {len(outputs)} tensors ({names}): say which to differentiate",
            hint=f"e.g. --loss '{floating[0]}.sum()'" + (combined if len(floating) > 1 else ""),
        )
    from .loss import as_loss

    made = as_loss(loss, init, library_dirs)
    assert made is not None
    return made.apply(outputs if output is None else output, outputs, inputs)
