"""`gradcli grads TARGET`: the user's model from `model.py:NAME` or `package.module:NAME`,
made and fed the way `trace` makes and feeds it (targets/: the loader, --init, inputs bound
by forward's signature, --loss: an expression or your own loss, targets/loss.py), then judged by `grads`.

Nothing here loads or binds on its own: it only strings the targets/ steps together around
the watched forward and backward that `grads` needs to run itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import UsageError
from ..targets.construct import parse_init, resolve
from ..targets.inputs import bind_inputs
from ..targets.load import load_object, users_code
from ..targets.loss import as_loss
from ..targets.outputs import name_outputs, reduce_output
from .result import GradsResult
from .run import grads_of


def grads_target(
    where: str,
    variables: Sequence[str] = (),
    *,
    loss: Any = None,
    init: Sequence[str] = (),
    loss_init: Sequence[str] = (),
    seed: int | None = None,
    dtype: str | None = None,
    device: str = "cpu",
    library_dirs: Sequence[str | Path] = (),
    **options: Any,
) -> GradsResult:
    """Load, construct, bind and judge; `options` are grads' (steps, lr, vanish, ...)."""
    obj, where = load_object(where)
    made = as_loss(loss, loss_init, library_dirs)
    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
    # One seed drives the initialisation, the random inputs and forward's own randomness
    # (dropout), on a copy of torch's RNG state, so --seed repeats the whole run.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        callee = resolve(obj, where, parse_init(init))
        model = callee.model
        if model is None:
            raise UsageError(
                f"{where} is {callee.found}: grads judges a model's parameters",
                hint="name an nn.Module subclass, a factory returning one, or a module instance",
            )
        if next(model.parameters(), None) is None:  # "OK: all 0 parameters ..." would pass CI on nothing
            raise UsageError(f"{where} is {callee.found}, which has no parameters: grads judges a model's parameters",
                             hint="name the model that holds the layers (trace follows the gradient of any callable)")
        if dtype is not None:
            from ..interpret.variables import resolve_dtype

            model.to(resolve_dtype(dtype))
        inputs = bind_inputs(
            callee.signature_of, where, variables, (), {}, dtype=dtype or _model_dtype(model),
            device=device, seed=seed, data_inputs=True, loss_names=made.names() if made else (),
        )

        def loss_fn(output: Any) -> Any:
            outputs = name_outputs(output, where)
            if made is None:
                return reduce_output(outputs, inputs.tensors, None)[0]
            return made.apply(output, outputs, inputs.tensors)[0]

        with users_code(where):
            result = grads_of(model, tuple(inputs.args), inputs.kwargs, loss_fn, **options)
    result.target, result.found, result.seed = where, callee.found, seed
    return result


def _model_dtype(model: Any) -> str:
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return str(tensor.dtype).removeprefix("torch.")
    return "float32"
