"""`grads_of`, the judge of `gradcli grads` and `gradcli.grads(model, *inputs, loss=...)`
(both run it through targets/model.py): one forward and backward, watched, and every
parameter's gradient judged.

The model is used as given (its mode, dtype and device): forward runs under a
ForwardObserver, gradients are taken with `torch.autograd.grad`, so the parameters' `.grad`
is left as it was, and buffers that forward updates in place (BatchNorm's running
statistics) are restored afterwards. A hand-written check does the same forward and
backward, so the extra cost is the observer and a few passes over the gradients.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

import torch

from ..errors import LimitError, UsageError
from ..targets.model import refuse_untrained, restored_buffers, scalar_loss
from .nonfinite import find_origin
from .observe import ForwardObserver
from .reasons import no_grad_findings, zero_finding
from .result import GradsResult, ParamHealth
from .stats import grad_stats, param_norms
from .steps import run_steps, step_findings
from .thresholds import Thresholds
from .verdicts import judge_sizes, median_ratio, nonfinite_finding, nonfinite_loss_finding

LossFn = Callable[[Any], Any]
#: What grads needs a target to be (the end of the refusal of any other, targets/model.py's on_model).
PURPOSE = "grads judges a model's parameters"
#: --steps shows how the first updates go; a training run is not what grads is for.
MAX_STEPS = 1000


def grads_of(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    loss_fn: LossFn,
    *,
    steps: int = 0,
    lr: float = 0.01,
    vanish: float = Thresholds.vanish,
    explode: float = Thresholds.explode,
    spread: float = Thresholds.spread,
    strict: bool = False,
    depth: int | None = None,
) -> GradsResult:
    """grads with forward's arguments given as args and kwargs (the CLI binds them by name).
    `depth` folds the modules deeper than it into one row of the table (None: none folded)."""
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"grads needs a torch.nn.Module, not {type(model).__name__}")
    if depth is not None and depth < 0:
        raise UsageError("--depth must be 0 or more")
    if steps < 0:
        raise UsageError(f"--steps must be 0 or more, not {steps}")
    if steps > MAX_STEPS:
        raise LimitError(f"--steps {steps:,} is beyond the limit of {MAX_STEPS:,}", hint="a few steps show what a run would do")
    if steps and not (lr > 0 and math.isfinite(lr)):
        raise UsageError(f"--lr must be a positive finite number, not {lr}")
    thresholds = Thresholds(vanish, explode, spread)
    call = _Call(model, args, kwargs)
    refuse_untrained(model, "grads judges a model's parameters",
                     hint="give the model whose parameters you train; gradcli trace follows any computation")
    named = list(model.named_parameters())
    ids = {id(p): name for name, p in named}
    trainable = [p for _, p in named if p.requires_grad]
    rng_state = torch.random.get_rng_state()
    with restored_buffers(model):
        with ForwardObserver(model) as watch:
            value = scalar_loss(loss_fn(call()))
        found, error = _gradients(value, trainable)
        record = watch.record
        params = _rows(model, named, dict(zip((id(p) for p in trainable), found)), record.first_use)
        loss_value = float(value.detach())
        del value, found
        result = GradsResult(type(model).__name__, loss_value, params, thresholds, None, strict, depth=depth)
        result.module_types = {path: type(m).__name__ for path, m in model.named_modules()}
        if error is not None:
            result.error = error  # no gradient to judge: the error is the finding
            return result
        _judge(result, record, ids)
        nonfinite_gradients = any(p.flags.count("NONFINITE") for p in result.judged)
        if nonfinite_gradients or not math.isfinite(loss_value):
            result.origin = find_origin(model, call, loss_fn, trainable, rng_state)
            for p in result.judged:
                p.findings = [nonfinite_finding(p, result.origin) if f.flag == "NONFINITE" else f for f in p.findings]
            if not math.isfinite(loss_value) and nonfinite_gradients:
                result.notes.append(f"the loss is {loss_value}")  # the gradients' findings tell it
            elif not math.isfinite(loss_value):  # finite gradients of a loss that is no number
                result.loss_finding = nonfinite_loss_finding(loss_value, result.origin)
    if steps:
        result.steps, norms, ratios = run_steps(model, args, kwargs, loss_fn, result.params, steps, lr)
        for p in result.judged:
            p.steps = norms[p.name]
            p.findings += step_findings(p, ratios[p.name], lr, thresholds)
    return result


#: The run's options, defined once with their defaults by grads_of's keyword-only parameters;
#: grads() takes them out of its keyword arguments, which otherwise go to forward and the loss
#: (the command line binds forward's arguments apart, so a forward input named `lr` stays one).
RUN_OPTIONS = tuple(
    name for name, p in inspect.signature(grads_of).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
)


def _gradients(value: torch.Tensor, trainable: list[torch.Tensor]) -> tuple[tuple[Any, ...], str | None]:
    """Each trainable parameter's gradient (None where it got none), or torch's error."""
    if not value.requires_grad or not trainable:
        return (None,) * len(trainable), None
    try:
        return torch.autograd.grad(value, trainable, allow_unused=True), None
    except RuntimeError as err:  # an autograd error (an in-place change of a saved tensor, ...)
        return (None,) * len(trainable), str(err).strip()


def _judge(result: GradsResult, record: Any, ids: dict[int, str]) -> None:
    judged = result.judged
    no_grad_findings([p for p in judged if p.grad_norm is None], record, ids)
    for p in judged:
        if p.grad_norm is not None and not _finite(p):
            p.findings.append(nonfinite_finding(p, None))
        elif p.zero_share == 1.0:
            p.findings.append(zero_finding(p, record))
    sized = [p for p in judged if not p.findings]
    result.median_ratio = median_ratio(sized)
    judge_sizes(sized, result.thresholds, result.median_ratio)


def _finite(p: ParamHealth) -> bool:
    """Every element of the gradient is finite: its largest magnitude is. (Its norm may still
    overflow, [1e308, -1e308] in float64: a finite gradient whose ratio is inf, judged by size.)"""
    return p.max_abs is not None and math.isfinite(p.max_abs)


def _rows(model: torch.nn.Module, named: list, grads: dict[int, Any], first_use: dict[str, int]) -> list[ParamHealth]:
    """One row per parameter, in the order forward first used them (unused ones last)."""
    sizes = param_norms([p for _, p in named])
    present = [(name, g) for name, p in named if (g := grads.get(id(p))) is not None]
    stats = dict(zip((name for name, _ in present), grad_stats([g for _, g in present])))
    squares: dict[str, float] = {}
    for (name, _), size in zip(named, sizes):
        path = name.rpartition(".")[0]
        squares[path] = squares.get(path, 0.0) + size * size
    rows = []
    for (name, p), size in zip(named, sizes):
        path = name.rpartition(".")[0]
        s = stats.get(name)
        rows.append(ParamHealth(
            name=name, module=path, module_type=type(model.get_submodule(path)).__name__,
            shape=tuple(p.shape), numel=p.numel(), frozen=not p.requires_grad,
            order=first_use.get(name), param_norm=size, reference_norm=size or math.sqrt(squares[path]),
            grad_norm=s.grad_norm if s else None, max_abs=s.max_abs if s else None,
            mean_abs=s.mean_abs if s else None, zero_share=s.zero_share if s else None,
        ))
    position = {name: k for k, (name, _) in enumerate(named)}
    rows.sort(key=lambda r: (r.order is None, r.order or 0, position[r.name]))
    return rows


class _Call:
    """forward's call with its arguments, to run again (the non-finite origin's second pass)."""

    def __init__(self, model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.model, self.args, self.kwargs = model, args, kwargs

    def __call__(self) -> Any:
        return self.model(*self.args, **self.kwargs)
