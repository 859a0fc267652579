"""Loading a user's torch.autograd.Function and making its inputs.

`check-function PATH.py:NAME` imports PATH.py, which runs the code in it exactly as
`python PATH.py` would (module-level code included): that is the point, and the help says
so. Anything the file raises becomes a UserCodeError (exit 2) naming the file and line, not
a traceback. Inputs are named after forward's parameters (after ctx, unless the Function
uses setup_context); parameters with a numeric default (`beta=1.0`) are passed as Python
numbers, the others as float64 tensors.
"""

from __future__ import annotations

import inspect
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from ..errors import UsageError, UserCodeError
from ..build.variables import make_tensor, parse_var

#: Default tensor input: 8 values in [-3, 3], both signs, +-1 included, 0 avoided (a kink
#: of relu-like functions, where finite differences mislead).
DEFAULT_INPUT = (-2.5, -1.0, -0.5, -0.1, 0.2, 0.5, 1.0, 2.5)


def load_function(target: str) -> type:
    """The class NAME from PATH.py or from an importable module (`target` is "PATH.py:NAME"
    or "package.module:NAME", NAME possibly dotted): loaded as trace loads code
    (targets/load.py: the file's folder on sys.path, errors in it shown with its own frames)."""
    from ..targets.load import is_code_target, load_object

    if not is_code_target(target):
        raise UsageError(f"'{target}' is not PATH.py:NAME or package.module:NAME",
                         hint="e.g. gradcli check-function my_ops.py:Swish")
    value, where = load_object(target)
    return check_class(value, where)


def is_function_class(value: Any) -> bool:
    return inspect.isclass(value) and issubclass(value, torch.autograd.Function) and value is not torch.autograd.Function


def check_class(value: Any, where: str) -> type:
    if not is_function_class(value):
        kind = type(value).__name__ if not inspect.isclass(value) else f"class {value.__name__}"
        raise UserCodeError(
            f"{where} is a {kind}, not a torch.autograd.Function",
            hint="subclass torch.autograd.Function with static forward(ctx, ...) and backward(ctx, grad)",
        )
    return value


def describe_exception(err: BaseException, path: Path | None = None) -> str:
    """'ValueError: msg (at file.py line 12)': the innermost frame in the user's file."""
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if path is not None and Path(f.filename).resolve() == path.resolve()]
    frame = (mine or frames or [None])[-1]
    where = f" (at {Path(frame.filename).name} line {frame.lineno})" if frame is not None else ""
    return f"{type(err).__name__}: {err}{where}"


@dataclass
class Inputs:
    """forward's arguments in order: names, values (tensors or numbers), which are tensors."""

    names: list[str]
    values: list[Any]
    tensor: list[bool]
    defaulted: list[str]

    def tensors(self) -> dict[str, torch.Tensor]:
        return {n: v for n, v, t in zip(self.names, self.values, self.tensor) if t}

    def numbers(self) -> dict[str, Any]:
        return {n: v for n, v, t in zip(self.names, self.values, self.tensor) if not t}


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


def make_inputs(cls: type, options: Sequence[str], seed: int, *, given: Mapping[str, object] | None = None) -> Inputs:
    """Values for forward's parameters from `given` (actual argument values, e.g. those a
    model's forward passed), else --var options, else the defaults."""
    params = forward_parameters(cls)
    specs = {}
    for option in options:
        spec = parse_var(option)
        specs[spec.name] = spec
    names = [p.name for p in params]
    unknown = [n for n in specs if n not in names]
    if unknown:
        raise UsageError(f"--var {unknown[0]}: {cls.__name__}.forward has no input '{unknown[0]}'",
                         hint="its inputs are: " + ", ".join(names))
    generator = torch.Generator().manual_seed(seed)
    values, tensor, defaulted = [], [], []
    for k, p in enumerate(params):
        number = isinstance(p.default, (int, float)) and not isinstance(p.default, bool)
        spec = specs.get(p.name)
        if given is not None and p.name in given:
            value = given[p.name]
            floating = isinstance(value, torch.Tensor) and value.is_floating_point()
            # A received floating tensor is differentiated like a --var one; anything else
            # (an integer index tensor, a number, None) is passed exactly as it was received.
            if isinstance(value, torch.Tensor):
                value = value.detach().to(torch.float64).requires_grad_(True) if floating else value.detach()
            values.append(value)
            tensor.append(floating)
        elif number:
            if spec is not None and spec.kind != "number":
                raise UsageError(f"--var {p.name}: '{p.name}' has a numeric default, so it takes a number")
            values.append(spec.args[0] if spec is not None else p.default)
            tensor.append(False)
        elif spec is not None:
            if spec.integer:
                raise UsageError(f"--var {p.name}: check-function differentiates every tensor input, and "
                                 f"{spec.text} gives integers (randint), data without a gradient",
                                 hint="give float values, e.g. uniform(0, 5, 4)")
            values.append(make_tensor(spec, dtype=torch.float64, device="cpu", generator=generator))
            tensor.append(True)
        elif p.default is not inspect.Parameter.empty:
            values.append(p.default)
            tensor.append(False)
        else:
            # Distinct values per input, so that swapped gradients show.
            base = torch.tensor(DEFAULT_INPUT, dtype=torch.float64).roll(3 * k) * (1 + 0.2 * k)
            values.append(base.requires_grad_(True))
            tensor.append(True)
            defaulted.append(p.name)
    return Inputs(names, values, tensor, defaulted)
