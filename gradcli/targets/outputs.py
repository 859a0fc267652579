"""From what the user's code returned to the one tensor backward starts from.

A tensor is `out`; a tuple or list gives `out`, `out_1`, `out_2`...; a dict gives its keys.
With `--loss EXPR` (gradcli's expression language) the output is reduced by that expression,
in which those names and the tensor inputs are bound: `--loss "cross_entropy(out, labels)"`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..errors import GradcliError, UsageError


def name_outputs(output: Any, where: str) -> dict[str, Any]:
    """The tensors of `output` by name."""
    import torch

    if isinstance(output, torch.Tensor):
        return {"out": output}
    if isinstance(output, (tuple, list)):
        named = {("out" if i == 0 else f"out_{i}"): v for i, v in enumerate(output) if isinstance(v, torch.Tensor)}
    elif isinstance(output, dict):
        named = {str(k): v for k, v in output.items() if isinstance(v, torch.Tensor) and str(k).isidentifier()}
    else:
        named = {}
    if not named:
        raise UsageError(
            f"{where} returned a {type(output).__name__}, not a tensor: there is no graph to trace",
            hint="return the tensor (or a tuple or dict of tensors) that the loss is computed from",
        )
    return named


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
    from ..build.to_torch import build
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
