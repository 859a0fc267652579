"""`compare_of`, the judge of `gradcli compare` and `gradcli.compare(model, *inputs, loss=...,
compile=True, amp="bfloat16")` (both run it through targets/model.py): the candidate setup's
gradients against the eager reference's, parameter by parameter, and where and why they part.

The healthy path is two runs on copies of the model (reference, candidate) and one pass over
the gradients, as a hand-written check would do. Only when a parameter leaves tolerance do
the extra runs happen: both sides again with every module watched (where it starts), and the
reruns that make the evidence of causes.py.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import GradcliError, UsageError
from ..targets.load import user_error
from ..targets.model import refuse_untrained
from .causes import find_causes
from .locate import locate
from .result import CompareResult
from .runs import FACTOR, Runs
from .setup import Setup
from .side import LossFn

#: What compare needs a target to be (the end of the refusal of any other, targets/model.py's on_model).
PURPOSE = "compare judges a model's parameter gradients"

def compare_of(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: LossFn, setup: Setup,
               *, factor: float = FACTOR) -> CompareResult:
    """compare with forward's arguments given as args and kwargs (the CLI binds them by name)."""
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"compare needs a torch.nn.Module, not {type(model).__name__}")
    refuse_untrained(model, PURPOSE)
    setup.check_machine()
    with torch.random.fork_rng(devices=[]):
        runs = Runs(model, args, kwargs, loss_fn, torch.random.get_rng_state(), setup, factor)
        reference = runs.reference(sized=True)
        try:
            candidate = runs.candidate()
        except GradcliError:
            raise
        except Exception as err:  # the reference ran: torch cannot run this model in this setup
            raise user_error(f"the candidate ({setup.describe()}) raised, while the reference ran:", err) from None
        runs.sizes = reference.sizes
        if candidate.scaler_steps:
            runs.settled = candidate.scaler_steps[-1].scale
        parameters = runs.judge(reference, candidate)
        result = CompareResult(
            type(model).__name__, setup, parameters, runs.module_of, {path: type(m).__name__ for path, m in model.named_modules()},
            reference.loss, candidate.loss, factor, scaler_steps=candidate.scaler_steps,
        )
        if setup.scaler and candidate.scaler_steps:
            settled = candidate.scaler_steps[-1]
            if settled.skipped:
                result.notes.append(f"GradScaler skipped all {len(candidate.scaler_steps)} steps (scale down to {settled.scale:g})")
        if not all(p.agrees for p in parameters):  # (a loss alone that disagrees has no module to locate)
            watched_ref, watched_cand = runs.reference(watch=True), runs.candidate(watch=True)
            result.first_divergence = locate(watched_ref, watched_cand, runs.module_tolerance, parameters, runs.module_of)
            result.causes = find_causes(runs, result, watched_ref, watched_cand)
    return result
