"""The arguments check-function passes to a user's forward, typed as forward wants them.

Real Functions take more than float tensors: integer dims (`dim=1`), index tensors (a loss's
targets), boolean masks, None, and numbers that may also be given as tensors (entmax's
`alpha=1.5`, whose gradient is documented). Each parameter's type is inferred from its
annotation, then its default (`ArgType`); a `--var` spec is read in that light (`value_for`):
an int literal stays an int, `[0, 2]` for an integer parameter is a long tensor, a mask a
bool tensor, `none` None, and a tensor spec for a numeric parameter a floating tensor that is
differentiated. Where neither annotation nor default says, ints written are ints as in Python
and torch (`dim=1` an int, `[0, 2]` an int64 tensor) and floats floats. A parameter annotated
`Tensor` reads written integers as torch.tensor does too (`target=[[0], [2]]` an int64 tensor,
which kornia's `_TargetLogSoftmax` gathers with), unless forward would then have no floating
input: then the first of them becomes a float64 input that is differentiated, and a note says
so. Only floating tensors require grad and are checked; the rest is data.

A parameter with neither --var nor default gets a value invented here (`invented`), and the
Inputs remember it, so that when the user's code raises the error can say what gradcli
passed on its own (`Inputs.invented_note`).
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import torch

from ...interpret.annotations import ArgKind, ArgType, argument_type
from ...interpret.constructors import Values
from ...interpret.variables import VarInput, VarSpec, make_tensor, read_vars
from ...errors import UsageError
from .userfile import DEFAULT_INPUT

#: Where an argument's value came from.
Origin = Literal["--var", "given", "default", "invented"]


def is_differentiated(value: Any) -> bool:
    """Only floating tensors are differentiated (and checked); integers, masks, numbers are data."""
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def value_for(spec: VarSpec, arg: ArgType, generator: torch.Generator) -> Any:
    """The value a --var spec gives a parameter of type `arg` (see the module docstring)."""
    if spec.kind == "none":
        return None
    integral = arg.kind in (ArgKind.INT, ArgKind.INTEGER_TENSOR)
    if spec.kind == "number" and arg.kind in (ArgKind.INT, ArgKind.FLOAT, ArgKind.BOOL):
        number = spec.args[0]
        if arg.kind is ArgKind.BOOL:
            return bool(number)
        return int(number) if spec.written is Values.INTEGER and arg.kind is ArgKind.INT else float(number)
    # Where nothing says what the parameter takes, a value is what Python makes of it: `dim=1`
    # an int (NumpySort's forward(x, dim) indexes with it), `[0, 2]` an int64 tensor as
    # torch.tensor([0, 2]) is (a loss's target that scatter() needs), floats float tensors.
    if spec.kind == "number" and arg.kind is ArgKind.ANY and spec.written is Values.INTEGER:
        return int(spec.args[0])
    tensor = make_tensor(spec, dtype=torch.float64, device="cpu", generator=generator).detach()
    if spec.kind != "constructor" and spec.written is Values.INTEGER:  # ints written for integer data
        if integral or arg.kind is ArgKind.ANY or (arg.kind is ArgKind.TENSOR and not arg.floating):
            return tensor.long()
        if arg.kind is ArgKind.BOOL_TENSOR:
            return tensor.bool()
    return tensor.requires_grad_(True) if tensor.is_floating_point() else tensor


def invented(arg: ArgType, index: int) -> Any:
    """A value for a parameter with neither --var nor default, by its type."""
    if arg.optional:
        return None
    if arg.kind is ArgKind.INT:
        return -1  # the last dimension: what a `dim` without a default means most often
    if arg.kind is ArgKind.FLOAT:
        return 1.0
    if arg.kind is ArgKind.BOOL:
        return False
    if arg.kind is ArgKind.INTEGER_TENSOR:
        return torch.arange(len(DEFAULT_INPUT)) % 3
    if arg.kind is ArgKind.BOOL_TENSOR:
        return torch.arange(len(DEFAULT_INPUT)) % 2 == 0
    # Distinct values per input, so that swapped gradients show.
    base = torch.tensor(DEFAULT_INPUT, dtype=torch.float64).roll(3 * index) * (1 + 0.2 * index)
    return base.requires_grad_(True)


def from_given(value: Any) -> Any:
    """An actual argument (fn-discover's): a floating tensor becomes a float64 leaf requiring
    grad; other tensors are copied as data; anything else is passed as it is."""
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        return copy.to(torch.float64).requires_grad_(True) if copy.is_floating_point() else copy
    return value


@dataclass
class Inputs:
    """forward's arguments in order: names, values, which are differentiated (floating
    tensors), each one's type and origin, and the ones gradcli invented."""

    names: list[str]
    values: list[Any]
    tensor: list[bool]  # differentiated: a floating tensor
    defaulted: list[str]  # invented by gradcli: no --var, no given value, no default
    types: list[ArgType] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    seed: int = 0
    notes: list[str] = field(default_factory=list)  # how a written value was read, where it was not as torch reads it

    def tensors(self) -> dict[str, torch.Tensor]:
        return {n: v for n, v, t in zip(self.names, self.values, self.tensor) if t}

    def numbers(self) -> dict[str, Any]:
        return {n: v for n, v, t in zip(self.names, self.values, self.tensor) if not t}

    def invented_note(self) -> str | None:
        """What gradcli passed on its own, for an error the user's code raised."""
        if not self.defaulted:
            return None
        described = "; ".join(f"{n} = {_short(self.values[self.names.index(n)])}" for n in self.defaulted)
        return (f"gradcli invented {', '.join(self.defaulted)} (no --var, no default): {described}; "
                "give real values with --var NAME=SPEC")

    def as_dicts(self) -> list[dict[str, Any]]:
        """One record per argument: name, kind, dtype and shape, whether differentiated, origin."""
        return [
            {"name": n, "kind": t.kind.value if t else None, "optional": t.optional if t else False,
             "value_type": _value_type(v), "dtype": str(v.dtype).removeprefix("torch.") if isinstance(v, torch.Tensor) else None,
             "shape": list(v.shape) if isinstance(v, torch.Tensor) else None, "differentiated": d, "origin": o}
            for n, v, d, t, o in zip(self.names, self.values, self.tensor, self.types or [None] * len(self.names),
                                     self.origins or ["--var"] * len(self.names))
        ]


def _value_type(value: Any) -> str:
    if value is None:
        return "none"
    return "tensor" if isinstance(value, torch.Tensor) else type(value).__name__


def _short(value: Any) -> str:
    from ... import words

    return str(words.input_value(value)) if isinstance(value, torch.Tensor) else repr(value)


def forward_parameters(cls: type) -> list[inspect.Parameter]:
    """forward's parameters after ctx (none to skip with setup_context)."""
    params = list(inspect.signature(cls.forward).parameters.values())  # type: ignore[attr-defined]
    uses_setup = getattr(cls, "setup_context") is not getattr(torch.autograd.Function, "setup_context")
    if not uses_setup:
        if not params:
            raise UsageError(f"{cls.__name__}.forward takes no ctx argument", hint="forward(ctx, x, ...)")
        params = params[1:]
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise UsageError(
                f"{cls.__name__}.forward takes *{p.name}: gradcli needs named inputs",
                hint="write forward(ctx, x, y) with one parameter per input",
            )
    if not params:
        raise UsageError(f"{cls.__name__}.forward takes no inputs")
    return params


def _hints(cls: type) -> dict[str, Any]:
    """forward's annotations resolved where Python can (strings stay strings otherwise)."""
    try:
        return typing.get_type_hints(cls.forward)  # type: ignore[attr-defined]
    except Exception:  # an annotation naming something undefined: read the text instead
        return {}


def make_inputs(cls: type, var: VarInput, seed: int, given: Mapping[str, object] | None = None) -> Inputs:
    """Values for forward's parameters: `given` values first, then --var values (parsed
    already, or parsed here), then the signature's defaults, else invented by type."""
    params = forward_parameters(cls)
    names = [p.name for p in params]
    specs = read_vars(var)
    given = dict(given or {})
    for what, chosen in (("--var", specs), ("given", given)):
        unknown = [n for n in chosen if n not in names]
        if unknown:
            raise UsageError(f"{what} {unknown[0]}: {cls.__name__}.forward has no input '{unknown[0]}'",
                             hint="its inputs are: " + ", ".join(names))
    hints = _hints(cls)
    generator = torch.Generator().manual_seed(seed)
    inputs = Inputs(names, [], [], [], seed=seed)
    for index, p in enumerate(params):
        arg = argument_type(p, hints.get(p.name, inspect.Parameter.empty))
        origin: Origin
        if p.name in given:
            value, origin = from_given(given[p.name]), "given"
        elif p.name in specs:
            value, origin = value_for(specs[p.name], arg, generator), "--var"
        elif p.default is not inspect.Parameter.empty:
            value = p.default.detach().clone() if isinstance(p.default, torch.Tensor) else p.default
            origin = "default"
            if is_differentiated(value):
                value = value.to(torch.float64).requires_grad_(True)
        else:
            value, origin = invented(arg, index), "invented"
            inputs.defaulted.append(p.name)
        inputs.values.append(value)
        inputs.tensor.append(is_differentiated(value))
        inputs.types.append(arg)
        inputs.origins.append(origin)
    if not any(inputs.tensor):
        _float_written_integers(inputs, specs)
    return inputs


def _float_written_integers(inputs: Inputs, specs: Mapping[str, VarSpec]) -> None:
    """Make the first integers written for a tensor parameter a float64 input, when forward has
    no floating input otherwise: a check needs something to differentiate, and the input comes
    before the data in forward's signature (forward(ctx, x, target)), as in torch's own losses."""
    for index, (name, value, arg) in enumerate(zip(inputs.names, inputs.values, inputs.types)):
        written = name in specs and specs[name].kind != "constructor" and specs[name].written is Values.INTEGER
        if written and arg.kind in (ArgKind.ANY, ArgKind.TENSOR) and isinstance(value, torch.Tensor) and not value.is_floating_point():
            inputs.values[index] = value.to(torch.float64).requires_grad_(True)
            inputs.tensor[index] = True
            inputs.notes.append(f"{name}: the integers written ({specs[name].text}) are read as float64 and "
                                "differentiated, as forward has no floating input otherwise (torch.tensor of them is int64)")
            return
