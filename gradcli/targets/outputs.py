"""From what the user's code returned to the one tensor backward starts from.

A tensor is `out`; a tuple or list gives `out`, `out_1`, `out_2`...; a dict gives its keys.
Tensors nested one level or more deeper (an LSTM's `(output, (h_n, c_n))`) are named by their
path: `out_1_0`, `out_1_1`, or `state_0` under a dict's key `state`. Those are for `--loss` to
name; without `--loss` only the top level counts (an LSTM's `out` alone is its output).
With `--loss EXPR` (gradcli's expression language) the output is reduced by that expression,
in which those names and the tensor inputs are bound: `--loss "cross_entropy(out, labels)"`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..errors import GradcliError, UsageError


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


def loss_variables(loss: str | None, library_dirs: Sequence[str | Path] = ()) -> list[str]:
    """The names --loss reads (parsed only; a bad --loss is refused here, before forward runs)."""
    if loss is None:
        return []
    from ..pipeline import load

    program, _ = load(loss, library_dirs)
    return list(program.variables)


def reduce_output(
    outputs: dict[str, Any], inputs: dict[str, Any], loss: str | None, library_dirs: Sequence[str | Path] = ()
) -> tuple[Any, list[tuple[str, Any]]]:
    """(the tensor to differentiate, the loss program's own bindings)."""
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
    from ..interpret.to_torch import build
    from ..pipeline import load

    program, library = load(loss, library_dirs)
    env = {**inputs, **outputs}
    missing = [name for name in program.variables if name not in env]
    if missing:
        raise UsageError(
            f"--loss uses '{missing[0]}', which is neither an output nor an input",
            hint="names here: " + ", ".join(env),
        )
    try:
        built = build(program, {name: env[name] for name in program.variables}, library=library)
    except GradcliError as err:
        raise err.at(loss, "--loss")
    return built.output, built.bindings
