"""What `trace` accepts: its options, an output to differentiate, and the starting gradient.

`gradcli trace`'s options as one frozen record (TraceOptions), and the refusals that keep a
trace from running on something with no gradient: a plain-number output, integer variables,
--wrt or --retain-grad naming what the expression does not have, a --grad-output of the
wrong shape or of integers. Each is a UsageError (exit 2) saying what would be right.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..interpret.variables import make_tensor, parse_spec
from ..errors import LimitError, UsageError
from ..targets.base import Computation
from ..graph.passes import MODES, PassMode

#: Passes in one trace (each is a full backward).
MAX_REPEAT = 1000


@dataclass(frozen=True)
class TraceOptions:
    """How to run the passes: the options of `gradcli trace`, as `trace()` takes them."""

    mode: PassMode = "backward"
    wrt: tuple[str, ...] = ()
    grad_output: str | None = None
    retain_graph: bool = False
    create_graph: bool = False
    repeat: int = 1
    zero_grad: bool = False
    retain_grad: tuple[str, ...] = ()
    flow: bool = False
    dtype: str | None = None  # None: float64 for an expression, a model's own dtype for code
    device: str = "cpu"
    symbolic: bool = False
    full_values: bool = False  # every value in the document, however large (else past 10,000 a summary)


def check_options(mode: str, repeat: int) -> None:
    if mode not in MODES:
        raise UsageError(f"unknown --mode '{mode}'", hint="choose backward or grad")
    if repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if repeat > MAX_REPEAT:
        raise LimitError(f"--repeat {repeat} is more than the limit of {MAX_REPEAT} passes")


def differentiable_output(output: Any, leaves: dict[str, Any], strict: bool = True) -> Any:
    import torch

    if not isinstance(output, torch.Tensor):
        raise UsageError(
            "the output is a plain number: it does not depend on any variable, so there is no graph",
            hint="use a variable in the last statement, e.g. x*2",
        )
    integers = [name for name, t in leaves.items() if not _floating(t)]
    if strict and not output.requires_grad and integers and len(integers) == len(leaves):
        raise UsageError(
            f"the output does not require grad: {', '.join(integers)} "
            f"{'holds' if len(integers) == 1 else 'hold'} integers (randint), data without a gradient",
            hint="give a float variable to differentiate, e.g. --var 'w=randn(4)'",
        )
    if not output.requires_grad and strict:
        raise UsageError(
            "the output does not require grad: no differentiable operation connects it to a variable",
            hint="comparisons and where(...)'s condition have no gradient; trace an expression of the variables",
        )
    return output


def _floating(tensor: Any) -> bool:
    return tensor.is_floating_point() or tensor.is_complex()


def refuse_integer_targets(wrt: Sequence[str], leaves: dict[str, Any]) -> None:
    for name in wrt:
        tensor = leaves.get(name)
        if tensor is not None and not _floating(tensor):
            raise UsageError(
                f"--wrt {name}: '{name}' holds integers (randint), data without a gradient",
                hint="differentiate with respect to a float variable",
            )


def known(name: str, tensors: dict[str, Any], option: str, what: str) -> Any:
    if name not in tensors:
        raise UsageError(
            f"{option} {name}: '{name}' is not {what} of the expression",
            hint="names here: " + (", ".join(tensors) or "(none)"),
        )
    return tensors[name]


def drew_random(computation: Computation, grad_output: str | None) -> bool:
    """Whether a leaf or the starting gradient drew random numbers, so the seed matters."""
    if grad_output is not None and grad_output.strip() != "ones":
        return parse_spec("grad-output", grad_output).random or computation.drew_random
    return computation.drew_random


def starting_gradient(spec: str | None, output: Any, seed: int, strict: bool = True) -> Any:
    """The starting gradient: None for a scalar output, `ones`, or a --var style SPEC.
    Without `strict`, a non-scalar output without SPEC is left to backward to refuse."""
    import torch

    shape = list(output.shape)
    if spec is None:
        if strict and (output.numel() != 1 or output.dim() != 0):
            raise UsageError(
                f"the output has shape {shape}, not a scalar, so backward needs a starting gradient",
                hint="add --grad-output ones (a gradient of ones), or reduce the output, e.g. (...).sum()",
            )
        return None
    if spec.strip() == "ones":
        return torch.ones_like(output).detach()
    parsed = parse_spec("grad-output", spec)
    if parsed.integer:
        raise UsageError("--grad-output holds a gradient, so its values are floats, not integers (randint)",
                         hint="e.g. --grad-output ones or --grad-output 'randn(3)'")
    generator = torch.Generator().manual_seed(seed + 1)
    tensor = make_tensor(parsed, dtype=output.dtype, device=output.device, generator=generator).detach()
    if list(tensor.shape) != shape:
        raise UsageError(
            f"--grad-output has shape {list(tensor.shape)} but the output has shape {shape}",
            hint="the starting gradient needs the output's exact shape; --grad-output ones always fits",
        )
    return tensor
