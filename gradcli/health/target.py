"""`gradcli grads TARGET`: the user's model made and fed by targets/model.py (the loader,
--init, inputs bound by forward's signature, --loss: an expression or your own loss), then
judged by `grads` inside the same seeded run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..targets.load import users_code
from ..targets.model import model_run
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
    with model_run(where, variables, purpose="grads judges a model's parameters", loss=loss, init=init,
                   loss_init=loss_init, seed=seed, dtype=dtype, device=device, library_dirs=library_dirs) as run:
        with users_code(run.where):
            result = grads_of(run.model, run.args, run.kwargs, run.loss_of, **options)
    result.target, result.found, result.seed = run.where, run.found, run.seed
    return result
