"""`gradcli memory TARGET`: the user's model made and fed by targets/model.py (the loader,
--init, inputs bound by forward's signature, --loss), then measured by `memory_of` inside the
same seeded run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..targets.code import tag_loss
from ..targets.load import users_code
from ..targets.model import model_run
from ..targets.outputs import name_outputs
from .result import MemoryResult
from .run import memory_of


def memory_target(
    where: str,
    variables: Sequence[str] = (),
    *,
    loss: str | None = None,
    loss_init: Sequence[str] = (),
    init: Sequence[str] = (),
    seed: int | None = None,
    dtype: str | None = None,
    device: str = "cpu",
    library_dirs: Sequence[str | Path] = (),
    **options: Any,
) -> MemoryResult:
    """Load, construct, bind and measure; `options` are memory_of's (depth, amp, checkpoint, ...)."""
    with model_run(where, variables, purpose="memory measures what a model's forward and backward keep", loss=loss,
                   loss_init=loss_init, init=init, seed=seed, dtype=dtype, device=device, library_dirs=library_dirs) as run:

        def loss_fn(output: Any) -> Any:
            value = run.loss_of(output)
            if isinstance(loss, str) and getattr(value, "grad_fn", None) is not None:  # its nodes' line: the --loss text
                tag_loss(value.grad_fn, loss, forward=[t.grad_fn for t in name_outputs(output, run.where).values()])
            return value

        with users_code(run.where):
            result = memory_of(run.model, run.args, run.kwargs, loss_fn, **options)
    result.target, result.found, result.seed = run.where, run.found, run.seed
    return result
