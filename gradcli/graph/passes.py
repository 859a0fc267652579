"""Run backward passes the way a PyTorch script would, and keep what each one left behind.

One pass is one call of `torch.autograd.backward` (mode "backward": fills the leaves'
.grad, accumulating across passes) or `torch.autograd.grad` (mode "grad": returns the
gradients, leaves' .grad untouched). Between passes `zero_grad` sets .grad to None, as
`optimizer.zero_grad()` does by default. An error from torch ends the run: it is kept,
explained, and later passes are not attempted (they would fail the same way).

`retain_graph` left off is passed as None, so torch applies its own default (retain the
graph exactly when `create_graph` is on); the pass records the effective value.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence, get_args

from .. import limits
from .explain import PassError, explain
from .values import all_finite


#: torch.autograd.backward (fills .grad) or torch.autograd.grad (returns the gradients).
PassMode = Literal["backward", "grad"]
MODES: tuple[PassMode, ...] = get_args(PassMode)


@dataclass
class PassPlan:
    """What to run: the same call, `repeat` times."""

    mode: PassMode
    output: Any
    grad_output: Any  # a tensor, or None for a scalar output
    targets: dict[str, Any]  # name -> tensor: --wrt (grad: what to differentiate; backward: inputs=)
    watched: dict[str, Any]  # name -> tensor whose .grad is read after a backward pass
    retain_graph: bool = False
    create_graph: bool = False
    repeat: int = 1
    zero_grad: bool = False
    explicit_targets: bool = False  # backward: pass `inputs=` only when --wrt was given


@dataclass
class PassRecord:
    """One pass: the options it ran with, the gradients it left, or torch's error."""

    index: int
    mode: PassMode
    retain_graph: bool
    create_graph: bool
    grads: dict[str, Any] = field(default_factory=dict)  # name -> tensor (detached copy) or None
    grad_fns: dict[str, str | None] = field(default_factory=dict)  # name -> gradient's grad_fn name
    error: PassError | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def nonfinite(self) -> list[str]:
        return [name for name, g in self.grads.items() if g is not None and not all_finite(g)]


def run_passes(plan: PassPlan, before_pass: Callable[[int], None] | None = None) -> tuple[list[PassRecord], dict[str, Any]]:
    """Run the plan; returns the records and the live gradients of the last successful pass."""
    records: list[PassRecord] = []
    live: dict[str, Any] = {}
    for index in range(plan.repeat):
        if before_pass is not None:
            before_pass(index)
        if index and plan.zero_grad:
            for tensor in plan.watched.values():
                tensor.grad = None
        record = PassRecord(index, plan.mode, plan.retain_graph or plan.create_graph, plan.create_graph)
        records.append(record)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                gradients = _run_once(plan)
            except (RuntimeError, ValueError, TypeError) as err:
                if limits.is_out_of_memory(err):  # no autograd error: the memory ran out (ulimit -v)
                    raise limits.out_of_memory() from None
                record.error = explain(err)
                gradients = None
        record.warnings = sorted({str(w.message).split(". ")[0].strip() for w in caught})
        if gradients is None:
            break
        live = gradients
        # A later pass accumulates into .grad in place, so each pass keeps a copy of what it
        # left; after the last one nothing writes to it again, and a copy of a model's
        # gradients (GPT-2's: 150 MB) would only cost time and memory.
        last = index == plan.repeat - 1
        for name, grad in gradients.items():
            record.grads[name] = None if grad is None else (grad.detach() if last else grad.detach().clone())
            fn = None if grad is None else grad.grad_fn
            record.grad_fns[name] = None if fn is None else fn.name()
    return records, live


def _run_once(plan: PassPlan) -> dict[str, Any]:
    import torch

    retain = True if plan.retain_graph else None
    outputs = [plan.output]
    grad_outputs = None if plan.grad_output is None else [plan.grad_output]
    if plan.mode == "grad":
        names = list(plan.targets)
        grads = torch.autograd.grad(
            outputs, [plan.targets[n] for n in names], grad_outputs=grad_outputs,
            retain_graph=retain, create_graph=plan.create_graph,
        )
        return dict(zip(names, grads))
    torch.autograd.backward(
        outputs, grad_tensors=grad_outputs, retain_graph=retain, create_graph=plan.create_graph,
        inputs=list(plan.targets.values()) if plan.explicit_targets else None,
    )
    return {name: current_grad(tensor) for name, tensor in plan.watched.items()}


def current_grad(tensor: Any) -> Any:
    """`.grad`, read only where torch keeps it (reading it on a non-leaf only warns)."""
    if tensor.is_leaf or tensor.retains_grad:
        return tensor.grad
    return None


def second_derivative(gradient: Any, variable: Any) -> tuple[Any, str | None]:
    """d/dvariable of sum(gradient): the second derivative, elementwise, for elementwise functions.

    Returns (tensor or None, a note). It runs autograd.grad on the gradient's own graph, which
    exists only when the pass ran with create_graph.
    """
    import torch

    if gradient is None or gradient.grad_fn is None:
        return None, "the gradient has no grad_fn: it does not depend on a variable (second derivative 0)"
    try:
        (second,) = torch.autograd.grad(gradient.sum(), [variable], retain_graph=True, allow_unused=True)
    except RuntimeError as err:
        return None, f"autograd could not differentiate the gradient: {str(err).splitlines()[0]}"
    if second is None:
        return None, "the gradient's graph does not reach this variable (second derivative 0)"
    return second.detach(), None


def names_with_grad(tensors: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The (name, tensor) pairs that can carry a gradient, as a dict (last binding wins)."""
    import torch

    return {
        name: value for name, value in tensors
        if isinstance(value, torch.Tensor) and value.requires_grad
    }
