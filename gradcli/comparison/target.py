"""`gradcli compare TARGET`: the user's model from `model.py:NAME` or `package.module:NAME`,
made and fed as `grads` makes and feeds it (targets/: the loader, --init, inputs bound by
forward's signature, --loss in gradcli's language), then compared in the candidate setup.

The same steps as health/target.py in the same order; only the last call differs. A
distributed candidate (issue 27) adds its setup here, not a second way to build the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import UsageError
from ..targets.construct import parse_init, resolve
from ..targets.inputs import bind_inputs
from ..targets.load import load_object, users_code
from ..targets.outputs import loss_variables, name_outputs, reduce_output
from .result import CompareResult
from .run import compare_of
from .setup import Setup


def compare_target(where: str, variables: Sequence[str] = (), *, setup: Setup, loss: str | None = None,
                   init: Sequence[str] = (), seed: int | None = None, library_dirs: Sequence[str | Path] = ()) -> CompareResult:
    """Load, construct, bind, and compare the candidate `setup` against the reference."""
    setup.check_machine()  # before the user's module is imported and built
    obj, where = load_object(where)
    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
    # One seed drives the initialisation, the inputs and forward's randomness (dropout), as in grads.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        callee = resolve(obj, where, parse_init(init))
        model = callee.model
        if model is None:
            raise UsageError(f"{where} is {callee.found}: compare judges a model's parameter gradients",
                             hint="name an nn.Module subclass, a factory returning one, or a module instance")
        inputs = bind_inputs(
            callee.signature_of, where, variables, (), {}, dtype=_model_dtype(model), device="cpu", seed=seed,
            data_inputs=True, loss_names=loss_variables(loss, library_dirs),
        )

        def loss_fn(output: Any) -> Any:
            value, _ = reduce_output(name_outputs(output, where), inputs.tensors, loss, library_dirs)
            return value

        with users_code(where):
            result = compare_of(model, tuple(inputs.args), inputs.kwargs, loss_fn, setup)
    result.target, result.found, result.seed = where, callee.found, seed
    return result


def _model_dtype(model: Any) -> str:
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return str(tensor.dtype).removeprefix("torch.")
    return "float32"
