"""Which custom torch.autograd.Functions a model's forward applied, and with which arguments.

`check-function model.py:Net --var x=...` checks the Functions the model really uses, at the
inputs they really received, which are the inputs that matter. The model is made and fed as
`trace` and `grads` make and feed it (targets/: the loader, --init, inputs bound by forward's
signature, one seed for the initialisation and the random inputs).

How the applications are seen: `torch.autograd.Function.apply` is replaced, for the one
forward only, by a wrapper that notes the class and a copy of its arguments, then calls the
real apply. The alternatives miss cases: a TorchFunctionMode never sees `apply` (checked on
torch 2.14: the mode sees only the operations inside forward), and the graph (a node's
`_forward_cls`) names a Function only when its output requires grad and reaches the
output, and keeps none of its non-tensor arguments. The wrapper sees every call, under
no_grad too, with numbers and None as passed. The arguments are copied before the call, so
an in-place Function (`mark_dirty`) or later in-place code cannot change what is checked.
XXX a Function that overrides `apply` itself is not seen.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch

from ...errors import UsageError
from ...targets.construct import Callee, parse_init, resolve
from ...targets.inputs import bind_inputs
from ...targets.load import users_code
from .find import Passed

#: Modules whose Functions are torch's (or gradcli's) own machinery, not the user's.
_NOT_CUSTOM = ("torch", "gradcli")


@dataclass
class Application:
    """A Function the forward applied: its first call's arguments (copied) and how often."""

    cls: type
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    calls: int = 1


@dataclass
class Applied:
    """What one forward of the model applied, in the order of first application."""

    found: str  # how the target was understood ("nn.Module subclass Net, constructed as Net()")
    seed: int
    applications: list[Application] = field(default_factory=list)
    skipped: list[Passed] = field(default_factory=list)


def is_model(obj: Any) -> bool:
    """Whether `obj` is code to run (an nn.Module class or instance, a factory, a function)
    rather than a Function class or something that is neither."""
    if inspect.isclass(obj):
        return issubclass(obj, torch.nn.Module)
    return callable(obj)


def applied_functions(obj: Any, where: str, variables: Sequence[str], *, init: Sequence[str], seed: int) -> Applied:
    """Run `obj`'s forward once on the --var inputs and note every custom Function applied."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        callee = resolve(obj, where, parse_init(init))
        inputs = bind_inputs(
            callee.signature_of, where, variables, (), {}, dtype=_dtype(callee), device="cpu", seed=seed,
            data_inputs=callee.model is not None,
        )
        seen: dict[type, Application] = {}
        with users_code(where), _recording(seen):
            callee.run(*inputs.args, **inputs.kwargs)
    applied = Applied(callee.found, seed)
    for application in seen.values():
        module = application.cls.__module__
        if module.split(".")[0] in _NOT_CUSTOM:
            name = f"{module}:{application.cls.__qualname__}"
            applied.skipped.append(Passed(name, f"{module.split('.')[0]}'s own Function, applied {_times(application.calls)}"))
        else:
            applied.applications.append(application)
    return applied


def bind_received(cls: type, application: Application) -> dict[str, Any]:
    """The received arguments by forward's parameter names (check_function's `given`)."""
    from ..function.inputs import forward_parameters

    signature = inspect.Signature(forward_parameters(cls))
    try:
        bound = signature.bind(*application.args, **application.kwargs)
    except TypeError as err:
        raise UsageError(f"{cls.__name__} was applied with arguments that do not fit forward{signature}: {err}") from None
    return dict(bound.arguments)


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n:,} times"


class _recording:
    """Function.apply replaced by a noting wrapper while the block runs, then put back."""

    def __init__(self, seen: dict[type, Application]) -> None:
        self.seen = seen
        self.original = torch.autograd.Function.__dict__["apply"]

    def __enter__(self) -> None:
        original, seen = self.original, self.seen

        def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
            if cls in seen:
                seen[cls].calls += 1
            else:
                seen[cls] = Application(cls, tuple(_copies(args)), dict(zip(kwargs, _copies(kwargs.values()))))
            return original.__get__(None, cls)(*args, **kwargs)

        torch.autograd.Function.apply = classmethod(apply)  # type: ignore[method-assign, assignment]

    def __exit__(self, *exc: Any) -> None:
        torch.autograd.Function.apply = self.original  # type: ignore[method-assign]


def _copies(values: Any) -> Iterator[Any]:
    for value in values:
        yield value.detach().clone() if isinstance(value, torch.Tensor) else value


def _dtype(callee: Callee) -> str:
    model = callee.model
    if model is None:
        return "float64"  # a function's inputs, as trace makes them
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return str(tensor.dtype).removeprefix("torch.")
    return "float32"
