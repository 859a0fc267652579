"""The `--var` constructors (`randn(3,3)`, `randint(0, 10, (2, 8))` ...): one row each.

A row says all gradcli needs to know about a constructor: its arguments, the shape they
describe (computed from the text alone, so the size limits refuse `randn(100000,100000)`
before anything is allocated), how to make the tensor, whether its values are floats (a leaf
that requires grad) or integers (data: token ids, labels, never differentiated), and whether
it draws random numbers (so that the seed matters). Adding a constructor is adding a row to
CONSTRUCTORS; the spec parser, the limits, the error hints and the help read the table.

A shape rule receives the row's name and the arguments (numbers, or one tuple of sizes) and
raises a VariableError or LimitError without a position; the parser adds the position and,
when the error has no hint, the row's usage line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, Union

from .. import limits
from ..errors import LimitError, VariableError

if TYPE_CHECKING:
    import torch

#: A constructor's arguments: numbers, or a tuple of numbers (a shape such as `(2, 8)`).
Argument = Union[float, tuple[float, ...]]
Args = tuple[Argument, ...]
Shape = tuple[int, ...]
#: How a row makes its tensor: (args, shape, generator, factory) -> tensor. `factory` holds
#: dtype and device (the --dtype for float rows, torch.long for integer rows).
Maker = Callable[[Args, Shape, "torch.Generator", Mapping[str, Any]], "torch.Tensor"]

MAX_DIMS = 8
#: Integer bounds beyond this are not exact as the floats the spec parser reads.
MAX_INTEGER = 2**53


class Values(Enum):
    """What a constructor's elements are, which decides the leaf's dtype and requires_grad."""

    FLOAT = "float"  # the --dtype; the leaf requires grad
    INTEGER = "integer"  # torch.long; data, never requires grad
    BOOL = "bool"  # torch.bool (a mask written [True, False]); data, never requires grad


@dataclass(frozen=True)
class Constructor:
    """One `--var` constructor: everything the parser, the limits and the maker need."""

    name: str
    usage: str  # one line: an example call and what its arguments mean (hints, help)
    arity: tuple[int, int]  # fewest and most positional arguments
    shape: Callable[[str, Args], Shape]
    make: Maker
    values: Values = Values.FLOAT
    random: bool = False
    #: The largest magnitude the values reach, from the arguments and the shape alone (so a
    #: value the dtype cannot hold is refused before torch turns it into inf); random draws
    #: and ones/zeros stay within a few units.
    largest: Callable[[Args, Shape], float] = lambda args, shape: 0.0

    @property
    def example(self) -> str:
        """The example call that opens the usage line, e.g. `randn(3,3)`."""
        return self.usage.partition(":")[0]


def _finite(name: str, args: Sequence[Argument]) -> None:
    for arg in args:
        for value in arg if isinstance(arg, tuple) else (arg,):
            if not math.isfinite(value):
                raise VariableError(f"{name}(): arguments must be finite")


def _number(name: str, arg: Argument) -> float:
    if isinstance(arg, tuple):
        raise VariableError(f"{name}(): expected a number here, not a tuple")
    return arg


def _sizes(name: str, args: Sequence[Argument]) -> Shape:
    """The shape given as sizes `(2, 8)` spread out or as one tuple `((2, 8))`."""
    if len(args) == 1 and isinstance(args[0], tuple):
        values: Sequence[Argument] = args[0]
    elif any(isinstance(a, tuple) for a in args):
        raise VariableError(f"{name}(): give the shape as sizes or as one tuple, e.g. {name}(..., 2, 8) or {name}(..., (2, 8))")
    else:
        values = args
    dims = []
    for value in values:
        if not (math.isfinite(value) and value == int(value) and value >= 0):
            raise VariableError(f"{name}(): sizes are non-negative integers")
        dims.append(int(value))
    if len(dims) > MAX_DIMS:
        raise LimitError(f"{name}(): at most {MAX_DIMS} dimensions")
    return tuple(dims)


def _integer(name: str, what: str, arg: Argument) -> int:
    value = _number(name, arg)
    if not (math.isfinite(value) and value == int(value) and abs(value) <= MAX_INTEGER):
        raise VariableError(f"{name}(): {what} is an integer (up to 2^53 in magnitude)")
    return int(value)


def _range(name: str, low: float, high: float) -> None:
    """torch computes the step as high - low: beyond a float64 it is inf, and the tensor inf and nan."""
    if not math.isfinite(high - low):
        raise VariableError(f"{name}(): the range from {low:g} to {high:g} is wider than a float64 can hold",
                            hint="keep high - low below 1.7e308")


# Shape rules ------------------------------------------------------------------------------


def _shape_sized(name: str, args: Args) -> Shape:
    _finite(name, args)
    return _sizes(name, args)


def _shape_full(name: str, args: Args) -> Shape:
    _number(name, args[-1])  # the fill value may be nan or inf: a leaf to trace, not a size
    return _sizes(name, args[:-1])


def _shape_uniform(name: str, args: Args) -> Shape:
    _finite(name, args)
    if not _number(name, args[0]) < _number(name, args[1]):
        raise VariableError("uniform(low, high, ...) needs low < high")
    _range(name, args[0], args[1])
    return _sizes(name, args[2:])


def _shape_linspace(name: str, args: Args) -> Shape:
    _finite(name, args)
    _range(name, _number(name, args[0]), _number(name, args[1]))
    return _sizes(name, [_number(name, args[2])])  # one dimension: the number of points


def _shape_arange(name: str, args: Args) -> Shape:
    # arange(end) | arange(start, end) | arange(start, end, step)
    _finite(name, args)
    numbers = [_number(name, a) for a in args]
    start, end, step = (0.0, numbers[0], 1.0) if len(numbers) == 1 else (*numbers[:2], numbers[2] if len(numbers) == 3 else 1.0)
    if step == 0:
        raise VariableError("arange(): the step cannot be 0")
    _range(name, start, end)
    if (end - start) * step < 0:  # torch raises on it; say which way the values would go
        raise VariableError(
            f"arange({start:g}, {end:g}, {step:g}): a step of {step:g} never goes from {start:g} to {end:g}",
            hint="give the step the sign of end - start",
        )
    count = (end - start) / step
    if not math.isfinite(count):  # (1e308 - 0) / 1e-300 overflows a float: ceil() of it would raise
        raise LimitError(
            f"arange({start:g}, {end:g}, {step:g}) would have more elements than a float64 can count",
            hint=f"a tensor holds at most {limits.MAX_ELEMENTS:,} elements here: use a larger step or a narrower range",
        )
    return (max(0, math.ceil(count)),)


def _shape_randint(name: str, args: Args) -> Shape:
    low, high = _integer(name, "low", args[0]), _integer(name, "high", args[1])
    if not low < high:
        raise VariableError(f"randint(low, high, shape) needs low < high (high is excluded), not {low} and {high}")
    return _sizes(name, args[2:])


# Largest magnitudes -----------------------------------------------------------------------


def _largest_fill(args: Args, shape: Shape) -> float:
    return abs(_number("full", args[-1]))


def _largest_ends(args: Args, shape: Shape) -> float:
    return max(abs(_number("range", args[0])), abs(_number("range", args[1])))


def _largest_arange(args: Args, shape: Shape) -> float:
    numbers = [_number("arange", a) for a in args]
    start, step = (0.0, 1.0) if len(numbers) == 1 else (numbers[0], numbers[2] if len(numbers) == 3 else 1.0)
    return max(abs(start), abs(start + (shape[0] - 1) * step)) if shape[0] else 0.0


# Makers -----------------------------------------------------------------------------------
# Random values are drawn in float64 on the CPU generator, then converted: the same seed
# gives the same values whatever the --dtype and --device.


def _make_randn(args: Args, shape: Shape, generator: Any, factory: Mapping[str, Any]) -> Any:
    import torch

    return torch.randn(shape, generator=generator, dtype=torch.float64).to(**factory)


def _make_rand(args: Args, shape: Shape, generator: Any, factory: Mapping[str, Any]) -> Any:
    import torch

    return torch.rand(shape, generator=generator, dtype=torch.float64).to(**factory)


def _make_uniform(args: Args, shape: Shape, generator: Any, factory: Mapping[str, Any]) -> Any:
    import torch

    low, high = args[0], args[1]
    return (low + (high - low) * torch.rand(shape, generator=generator, dtype=torch.float64)).to(**factory)


def _make_ones(args: Args, shape: Shape, generator: Any, factory: Mapping[str, Any]) -> Any:
    import torch

    return torch.ones(shape, **factory)


def _make_zeros(args: Args, shape: Shape, generator: Any, factory: Mapping[str, Any]) -> Any:
    import torch

    return torch.zeros(shape, **factory)


def _make_full(args: Args, shape: Shape, generator: Any, factory: Mapping[str, Any]) -> Any:
    import torch

    return torch.full(shape, args[-1], **factory)


def _make_linspace(args: Args, shape: Shape, generator: Any, factory: Mapping[str, Any]) -> Any:
    import torch

    return torch.linspace(args[0], args[1], shape[0], **factory)


def _make_arange(args: Args, shape: Shape, generator: Any, factory: Mapping[str, Any]) -> Any:
    import torch

    return torch.arange(*args, **factory)


def _make_randint(args: Args, shape: Shape, generator: Any, factory: Mapping[str, Any]) -> Any:
    import torch

    low, high = int(args[0]), int(args[1])
    return torch.randint(low, high, shape, generator=generator, dtype=torch.long).to(**factory)


_ROWS = (
    Constructor("randn", "randn(3,3): standard normal samples of that shape", (1, MAX_DIMS), _shape_sized,
                _make_randn, random=True),
    Constructor("rand", "rand(4): uniform samples in [0, 1)", (1, MAX_DIMS), _shape_sized, _make_rand, random=True),
    Constructor("ones", "ones(2,2)", (1, MAX_DIMS), _shape_sized, _make_ones),
    Constructor("zeros", "zeros(3)", (1, MAX_DIMS), _shape_sized, _make_zeros),
    Constructor("full", "full(3, 0.5): shape, then the fill value", (2, MAX_DIMS + 1), _shape_full, _make_full,
                largest=_largest_fill),
    Constructor("arange", "arange(0, 1, 0.25): start, end (excluded), step", (1, 3), _shape_arange, _make_arange,
                largest=_largest_arange),
    Constructor("linspace", "linspace(-3, 3, 101): start, end, number of points", (3, 3), _shape_linspace,
                _make_linspace, largest=_largest_ends),
    Constructor("uniform", "uniform(0.1, 2, 50): low, high, then the shape", (3, MAX_DIMS + 2), _shape_uniform,
                _make_uniform, random=True, largest=_largest_ends),
    Constructor("randint", "randint(0, 100, (2, 8)): integers in [low, high), then the shape; data, no gradient",
                (3, MAX_DIMS + 2), _shape_randint, _make_randint, values=Values.INTEGER, random=True),
)

#: Constructor name -> its row.
CONSTRUCTORS: dict[str, Constructor] = {row.name: row for row in _ROWS}


def check_size(row: Constructor, shape: Shape) -> None:
    """Refuse a shape beyond the per-tensor limit (before anything is allocated)."""
    size = math.prod(shape)
    if size > limits.MAX_ELEMENTS:
        count = f"{size:,}" if size < 10**15 else f"about 10^{len(str(size)) - 1}"
        raise LimitError(f"{row.name}(...) would have {count} elements; the limit is {limits.MAX_ELEMENTS:,} per tensor")


def described() -> str:
    """The constructors as examples, for `--var`'s help."""
    return ", ".join(row.example for row in CONSTRUCTORS.values())


def random_names() -> str:
    """The constructors that draw random numbers, for `--seed`'s help."""
    return "/".join(row.name for row in CONSTRUCTORS.values() if row.random)
