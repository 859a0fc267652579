"""`gradcli compare TARGET`: the user's model made and fed by targets/model.py (the loader,
--init, inputs bound by forward's signature, --loss), as `grads` makes and feeds it, then
compared in the candidate setup inside the same seeded run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..targets.load import users_code
from ..targets.model import model_run
from .result import CompareResult
from .run import compare_of
from .setup import Setup


def compare_target(where: str, variables: Sequence[str] = (), *, setup: Setup, loss: str | None = None,
                   loss_init: Sequence[str] = (), init: Sequence[str] = (), seed: int | None = None, library_dirs: Sequence[str | Path] = ()) -> CompareResult:
    """Load, construct, bind, and compare the candidate `setup` against the reference."""
    setup.check_machine()  # before the user's module is imported and built
    with model_run(where, variables, purpose="compare judges a model's parameter gradients", loss=loss, loss_init=loss_init,
                   init=init, seed=seed, library_dirs=library_dirs) as run:
        with users_code(run.where):
            result = compare_of(run.model, run.args, run.kwargs, run.loss_of, setup)
    result.target, result.found, result.seed = run.where, run.found, run.seed
    return result
