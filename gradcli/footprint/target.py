"""`gradcli memory TARGET`: the user's model made and fed the way `grads` makes and feeds it
(targets/: the loader, --init, inputs bound by forward's signature, --loss in gradcli's
language), then measured by `memory_of`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import UsageError
from ..targets.code import tag_loss
from ..targets.construct import parse_init, resolve
from ..targets.inputs import bind_inputs
from ..targets.load import load_object, users_code
from ..targets.outputs import loss_variables, name_outputs, reduce_output
from .result import MemoryResult
from .run import memory_of


def memory_target(
    where: str,
    variables: Sequence[str] = (),
    *,
    loss: str | None = None,
    init: Sequence[str] = (),
    seed: int | None = None,
    dtype: str | None = None,
    device: str = "cpu",
    library_dirs: Sequence[str | Path] = (),
    **options: Any,
) -> MemoryResult:
    """Load, construct, bind and measure; `options` are memory_of's (depth, amp, checkpoint, ...)."""
    obj, where = load_object(where)
    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
    # One seed drives the initialisation, the random inputs and forward's own randomness.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        callee = resolve(obj, where, parse_init(init))
        model = callee.model
        if model is None:
            raise UsageError(
                f"{where} is {callee.found}: memory measures what a model's forward and backward keep",
                hint="name an nn.Module subclass, a factory returning one, or a module instance",
            )
        if dtype is not None:
            from ..interpret.variables import resolve_dtype

            model.to(resolve_dtype(dtype))
        if device != "cpu":
            from ..interpret.variables import resolve_device

            model.to(resolve_device(device))
        inputs = bind_inputs(
            callee.signature_of, where, variables, (), {}, dtype=dtype or _model_dtype(model),
            device=device, seed=seed, data_inputs=True, loss_names=loss_variables(loss, library_dirs),
        )

        def loss_fn(output: Any) -> Any:
            outputs = name_outputs(output, where)
            value, _ = reduce_output(outputs, inputs.tensors, loss, library_dirs)
            if loss is not None and getattr(value, "grad_fn", None) is not None:  # its nodes' line: the --loss text
                tag_loss(value.grad_fn, loss, forward=[t.grad_fn for t in outputs.values()])
            return value

        with users_code(where):
            result = memory_of(model, tuple(inputs.args), inputs.kwargs, loss_fn, **options)
    result.target, result.found, result.seed = where, callee.found, seed
    return result


def _model_dtype(model: Any) -> str:
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return str(tensor.dtype).removeprefix("torch.")
    return "float32"
