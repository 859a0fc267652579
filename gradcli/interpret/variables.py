"""Variable values: the leaf tensors `--var NAME=SPEC` describes, sized before they are made.

var_spec.py parses each SPEC (a number, a nested list, a mask, `none`, or a constructor call
from constructors.py) without allocating anything; this module checks the total size and the
dtype's range, then makes the tensors: float leaves that require grad, integer data (randint)
and masks that do not, random values from one seeded generator. The dtype and device names
are resolved here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .. import limits
from ..errors import LimitError, Span, VariableError
from ..options import checked_seed
from .constructors import Values
from .var_spec import VarInput, VarSpec, parse_spec, parse_vars, read_vars  # parse_vars, read_vars: read from here
from .var_spec import parse_var as parse_var  # re-exported: importers read it from here

if TYPE_CHECKING:
    import torch

#: Values for variables given no --var in `trace`: distinct, unremarkable scalars.
DEFAULT_SCALARS = (0.5, 1.5, -0.75, 2.0, -1.25, 0.25, 1.0, -0.5)


def make_tensor(spec: VarSpec, *, dtype: "torch.dtype", device: Any, generator: "torch.Generator") -> "torch.Tensor":
    """Allocate the leaf tensor a spec describes: float values in `dtype`, requiring grad;
    integer values (randint) in torch.long and a mask in torch.bool, as data without a gradient."""
    import torch

    if spec.kind == "none":
        raise VariableError(f"--var {spec.name}=none: None is not a tensor",
                            hint="none is for a check-function argument that takes None")
    check_range(spec, dtype)
    mask = spec.written is Values.BOOL
    factory: dict[str, Any] = {"dtype": torch.long if spec.integer else torch.bool if mask else dtype, "device": device}
    if spec.constructor is None:  # a number or a nested list
        tensor = torch.tensor(spec.args[0], **factory)
    else:
        tensor = spec.constructor.make(spec.args, spec.shape, generator, factory)
    return tensor if spec.integer or mask else tensor.requires_grad_(True)


def _largest(spec: VarSpec) -> float:
    """The largest magnitude a spec's values reach: a number's or a list's own, else the row's."""
    if spec.constructor is not None:
        return spec.constructor.largest(spec.args, spec.shape)
    if spec.kind == "none":
        return 0.0
    values = spec.args[0]
    while isinstance(values, list) and values and isinstance(values[0], list):
        values = [item for row in values for item in row]
    return max(map(abs, values), default=0.0) if isinstance(values, list) else abs(values)


def check_range(spec: VarSpec, dtype: "torch.dtype") -> None:
    """Refuse values the dtype cannot hold: torch raises for some (full, linspace) and turns
    others into inf without a word (a list, arange, uniform)."""
    import torch

    largest, limit = _largest(spec), torch.finfo(dtype).max
    if math.isfinite(largest) and largest > limit:
        name = str(dtype).removeprefix("torch.")
        raise VariableError(
            f"the values reach {largest:.6g}, beyond {name}'s largest value {limit:.6g}",
            span=Span(1, 0, 1, len(spec.text)), hint="give smaller values, or a wider --dtype (float64)",
        ).at(spec.text, f"--var {spec.name}")


def check_total(specs: Iterable[VarSpec]) -> None:
    """Refuse variables whose total size is beyond the limit, before allocating any."""
    total = sum(s.numel for s in specs)
    if total > limits.MAX_TOTAL_ELEMENTS:
        raise LimitError(
            f"the variables have {total:,} elements in all; the limit is {limits.MAX_TOTAL_ELEMENTS:,}"
        )


@dataclass
class Leaves:
    """The leaf tensors of a program, with how each was specified."""

    tensors: dict[str, "torch.Tensor"]
    specs: dict[str, VarSpec]
    defaulted: list[str]  # variables without a --var, which got a default
    seed: int  # the seed random constructors used (printed, so a run can be repeated)


def make_leaves(
    variables: Sequence[str],
    var: VarInput,
    *,
    dtype: str = "float64",
    device: str = "cpu",
    seed: int | None = None,
    default: Any = None,
) -> Leaves:
    """Leaf tensors for a program's `variables` from `--var` values (parsed already, or
    parsed here): float leaves require grad, integer data (randint) does not.

    `default(name, index)` gives the spec text for a variable without --var (by default the
    DEFAULT_SCALARS in order). Without `seed`, random values draw a fresh seed, reported in
    the result so that `--seed` can repeat the run.
    """
    specs = read_vars(var)
    unused = [name for name in specs if name not in variables]
    if unused:
        raise VariableError(
            f"--var {unused[0]} names no variable of the expression",
            hint="the expression's variables are: " + (", ".join(variables) or "(none)"),
        )
    defaulted = []
    for index, name in enumerate(variables):
        if name not in specs:
            text = default(name, index) if default else default_spec(index)
            specs[name] = parse_spec(name, text)
            defaulted.append(name)
    check_total(specs.values())
    torch_dtype = resolve_dtype(dtype)
    torch_device = resolve_device(device)
    import torch

    if checked_seed(seed) is None:
        from ..seeds import draw_seed

        seed = draw_seed()
    generator = torch.Generator().manual_seed(seed)
    tensors = {
        name: make_tensor(specs[name], dtype=torch_dtype, device=torch_device, generator=generator)
        for name in variables
    }
    return Leaves(tensors, {name: specs[name] for name in variables}, defaulted, seed)


def default_spec(index: int) -> str:
    """The spec text of the index-th variable without a --var."""
    return repr(DEFAULT_SCALARS[index % len(DEFAULT_SCALARS)])


DTYPES = ("float64", "float32", "float16", "bfloat16")


def resolve_dtype(name: str) -> "torch.dtype":
    import torch

    if name not in DTYPES:
        raise VariableError(f"unknown --dtype '{name}'", hint="choose one of: " + ", ".join(DTYPES))
    return getattr(torch, name)


def resolve_device(name: str) -> Any:
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        raise VariableError(f"unknown --device '{name}'", hint="e.g. cpu, cuda, cuda:1, mps") from None
    if device.type not in ("cpu", "cuda", "mps", "xpu"):
        # meta and the like hold no values: nothing to differentiate or print.
        raise VariableError(f"--device {name}: gradcli needs a device that holds values", hint="e.g. cpu, cuda, mps")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise VariableError("--device cuda: no CUDA device is available here", hint="use --device cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise VariableError("--device mps: no MPS device is available here", hint="use --device cpu")
    return device
