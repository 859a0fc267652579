"""Why the candidate differs, from evidence: each cause is a rerun (or a measurement) that
shows it, never a guess from the setup's name.

- random ops: the reference itself changes when its generator is reseeded, so forward draws
  random numbers; both sides started from the same generator state, and in eval mode
  (dropout off) the candidate agrees, or not. A compiler that draws its own numbers
  (inductor) differs here while its arithmetic is sound.
- precision: gradients the candidate flushed to zero lie below float16's smallest normal
  (2^-14), and the loss scale that would lift the smallest of them above it; a bfloat16
  gradient whose error is within its 8-bit mantissa's bound over the reduction's length.
- graph breaks, from torch._dynamo.explain: how many graphs, and why each break.
- capture: the same graph run by dynamo's `eager` backend (no compiler) still differs, so it
  is what dynamo captured (a hook, a Python side effect not replayed), not the arithmetic.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from .gradients import UNIT_ROUNDOFF, Flag
from .result import Cause, CompareResult
from .side import SideRun

if TYPE_CHECKING:
    from .runs import Runs

#: float16's smallest normal number (2^-14) and largest finite one.
FP16_TINY = 2.0**-14
FP16_MAX = 65504.0
#: The generator state of the reseeded reference (any other seed would do).
RESEED = 0x5EED


def find_causes(runs: Runs, result: CompareResult, reference: SideRun, candidate: SideRun) -> list[Cause]:
    causes: list[Cause] = []
    setup = result.setup
    explained = False
    if setup.compile:
        random = _random_ops(runs, result)
        if random is not None:
            causes.append(random)
            explained = random.detail["eval_agrees"]
    if setup.precision == "float16":
        causes += _underflow(runs, result, reference, candidate)
    amplified = _amplified(result, reference, candidate)
    if amplified is not None:
        causes.append(amplified)
    if setup.precision == "bfloat16":
        causes += _bfloat16_reduction(runs, result)
    if setup.scaler and result.scaler_steps and result.scaler_steps[-1].skipped:
        causes.append(Cause("scaler-gave-up", {"steps": len(result.scaler_steps), "scale": result.scaler_steps[-1].scale}))
    if setup.compile:
        breaks = _graph_breaks(runs)
        if breaks is not None:
            causes.append(breaks)
        if not explained:
            capture = _capture(runs, result)
            if capture is not None:
                causes.append(capture)
    return causes


def _agreement(runs: Runs, reference: SideRun, candidate: SideRun) -> tuple[bool, float]:
    """Whether every parameter agrees, and the worst relative error."""
    compared = runs.judge(reference, candidate)
    worst = max((p.rel_err for p in compared if p.rel_err is not None), default=0.0)
    return all(p.agrees for p in compared), worst


def _random_ops(runs: Runs, result: CompareResult) -> Cause | None:
    """The reference reseeded: if its gradients move, forward draws random numbers; then both
    sides in eval mode say whether the draws were the whole difference."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RESEED)
        other = torch.random.get_rng_state()
    base = runs.reference()
    same, reseeded_err = _agreement(runs, base, runs.reference(rng_state=other))
    if same:
        return None  # the same gradients from another generator state: no random op matters
    eval_agrees, eval_err = _agreement(runs, runs.reference(replace(runs.reference_how, eval=True)),
                                       runs.candidate(replace(runs.candidate_how, eval=True, scaler=runs.candidate_how.scaler)))
    from torch.nn.modules.dropout import _DropoutNd

    modules = [f"{path} ({type(m).__name__})" for path, m in runs.model.named_modules() if isinstance(m, _DropoutNd)]
    return Cause("random-ops", {
        "same_generator_state": True, "reseeded_reference_rel_err": _finite(reseeded_err),
        "eval_agrees": eval_agrees, "eval_worst_rel_err": _finite(eval_err), "modules": modules,
    })


def _underflow(runs: Runs, result: CompareResult, reference: SideRun, candidate: SideRun) -> list[Cause]:
    """Gradients flushed to zero: how small the smallest lost one was, and the power-of-two
    loss scale that lifts it to float16's smallest normal without overflowing the largest."""
    flushed = [p.name for p in result.parameters if Flag.UNDERFLOW in p.flags]
    lost: list[float] = []
    largest = 0.0
    pairs = [(reference.modules[k].output_grad, candidate.modules[k].output_grad, runs.module_tolerance(k))
             for k in reference.modules if k in candidate.modules]
    pairs += [(reference.grads.get(n), candidate.grads.get(n), runs.tolerance(n)) for n in flushed]
    for ref, cand, tolerance in pairs:
        if ref is None or cand is None or ref.shape != cand.shape or not ref.numel():
            continue
        ref, cand = ref.detach().double(), cand.detach().double()
        size = ref.abs().where(torch.isfinite(ref), torch.zeros((), dtype=torch.float64))
        # As the UNDERFLOW flag counts them: an element below tolerance × the largest is noise.
        mask = (cand == 0) & (size > tolerance * float(size.max()))
        if bool(mask.any()):
            lost.append(float(ref[mask].abs().min()))
        largest = max(largest, float(ref[torch.isfinite(ref)].abs().max()) if ref.numel() else 0.0)
    # Zeros where the reference is above float16's smallest normal were not lost to the range but
    # to cancellation or another path (a ReLU whose input changed sign): no underflow then.
    lost = [x for x in lost if x < FP16_TINY]
    if not lost:
        return []
    smallest = min(lost)
    scale = 2.0 ** math.ceil(math.log2(FP16_TINY / smallest))  # at least 2: smallest < FP16_TINY
    used = result.scaler_steps[-1].scale if result.scaler_steps else None
    return [Cause("underflow", {
        "parameters": flushed, "smallest_lost": smallest, "smallest_normal": FP16_TINY,
        "scale": scale, "largest": largest, "scale_fits": largest * scale < FP16_MAX, "scaler_scale": used,
        "loss_dtype": candidate.loss_dtype,
    })]


def _amplified(result: CompareResult, reference: SideRun, candidate: SideRun) -> Cause | None:
    """A backward divergence at a module whose incoming gradient still agreed: its own backward
    multiplies the rounding error (BatchNorm over few values per channel subtracts nearly equal
    numbers). The evidence is the two measured errors, before and after the module."""
    d = result.first_divergence
    if d is None or d.forward_differs or d.module not in reference.modules or d.module not in candidate.modules:
        return None
    ref, cand = reference.modules[d.module], candidate.modules[d.module]
    from .locate import _rel_err

    before, after = _rel_err(ref.output_grad, cand.output_grad), _rel_err(ref.input_grad, cand.input_grad)
    if before is None or after is None or before <= 0 or after < 4 * before or before > d.tolerance:
        return None
    return Cause("amplified", {"module": f"{d.module} ({d.module_class})", "output_grad_rel_err": before,
                               "input_grad_rel_err": after, "factor": after / before})


def _bfloat16_reduction(runs: Runs, result: CompareResult) -> list[Cause]:
    """A bfloat16 gradient off by no more than rounding in every one of its n terms can add up
    to (u·n, the worst case of a long sum): the mantissa, not the model."""
    u = UNIT_ROUNDOFF[torch.bfloat16]
    within = []
    for p in result.parameters:
        if Flag.DIFFERS in p.flags and p.rel_err is not None:
            n = runs.reduction(p.name)
            if p.rel_err <= u * n:
                within.append({"name": p.name, "reduction": n, "rel_err": p.rel_err, "bound": u * n})
    return [Cause("bfloat16-reduction", {"parameters": within, "unit_roundoff": u})] if within else []


def _graph_breaks(runs: Runs) -> Cause | None:
    import torch._dynamo

    work = copy.deepcopy(runs.model)
    torch._dynamo.reset()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.random.set_rng_state(runs.rng_state)
            explained = torch._dynamo.explain(work)(*runs.args, **runs.kwargs)
    except Exception as err:  # explain failing is itself what the user should see
        return Cause("graph-breaks", {"graphs": None, "breaks": None, "reasons": [f"explain raised {type(err).__name__}: {err}"]})
    finally:
        torch._dynamo.reset()
    if explained.graph_break_count <= 0:  # none; -1 when dynamo captured no graph at all (graph_count - 1)
        return None
    reasons = [str(getattr(r, "reason", r)).strip().splitlines()[0] for r in explained.break_reasons]
    return Cause("graph-breaks", {"graphs": explained.graph_count, "breaks": explained.graph_break_count,
                                  "reasons": list(dict.fromkeys(reasons))})


def _capture(runs: Runs, result: CompareResult) -> Cause | None:
    """Dynamo's `eager` backend runs the captured graph with plain torch ops: if that differs
    too, the capture (a hook, a side effect) is the cause, not the backend's arithmetic."""
    how = runs.candidate_how
    if how.backend == "eager":
        agrees, err = False, max((p.rel_err or 0.0 for p in result.parameters), default=0.0)
    else:
        agrees, err = _agreement(runs, runs.reference(), runs.candidate(replace(how, backend="eager", mode=None)))
    if agrees:
        return None
    hooks = [f"{path or '(model)'}: {kind.strip('_').replace('_', ' ')}" for path, m in runs.model.named_modules()
             for kind in ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
             if getattr(m, kind)]
    return Cause("capture", {"eager_backend_rel_err": _finite(err), "hooks": hooks})


def _finite(x: float) -> Any:
    return x if math.isfinite(x) else str(x)
