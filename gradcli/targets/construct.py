"""Making the user's callable: an nn.Module class constructed with `--init KEY=VALUE`
(Python literals read with `ast.literal_eval`, never eval), a module instance as it is, a model
factory called, a Function through `.apply`, or a plain function of tensors.

Every command that runs the user's code (trace, grads, compare, memory, the distributed runs,
and `--loss` with `--loss-init`) makes it here, so what a NAME may be is decided once.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..errors import UsageError
from .load import user_error


@dataclass(frozen=True)
class Callee:
    """What a code target turned out to be: the callable to run, its model, how it was found."""

    run: Any
    model: Any  # the nn.Module, or None for a plain function
    found: str
    signature_of: Any  # whose signature names the inputs


def resolve(obj: Any, where: str, init: dict[str, Any]) -> Callee:
    """What `obj` is, and how to run it; anything that cannot be run is an exit-2 error."""
    import torch

    nn = torch.nn
    if inspect.isclass(obj) and issubclass(obj, nn.Module):
        model = call_user(obj, init, where, "constructing")
        return Callee(model, model, f"nn.Module subclass {obj.__name__}, constructed as {_call_text(obj.__name__, init)}", model.forward)
    if isinstance(obj, nn.Module):
        if init:
            raise UsageError(f"{where} is an nn.Module instance, already constructed: --init does not apply", hint="drop --init")
        return Callee(obj, obj, f"nn.Module instance of {type(obj).__name__}", obj.forward)
    if inspect.isclass(obj) and issubclass(obj, torch.autograd.Function):
        if init:
            raise UsageError(f"{where} is a torch.autograd.Function: --init does not apply", hint="drop --init")
        return Callee(obj.apply, None, f"torch.autograd.Function {obj.__name__}, called through .apply", _function_signature(obj))
    if inspect.isclass(obj) or not callable(obj):
        kind = f"class {obj.__name__}" if inspect.isclass(obj) else f"{type(obj).__name__} value"
        raise UsageError(
            f"{where} is a {kind}: gradcli traces an nn.Module (class, instance or factory) or a function",
            hint="name an nn.Module subclass, a function returning one, a module instance, or a function of tensors",
        )
    if init or not _required(obj):
        made = call_user(obj, init, where, "calling")
        if not isinstance(made, nn.Module):
            raise UsageError(
                f"{where} called as {_call_text(getattr(obj, '__name__', 'NAME'), init)} returned a {type(made).__name__}, not an nn.Module",
                hint="--init is for a model factory; a function of tensors takes its inputs from --var",
            )
        return Callee(made, made, f"model factory {getattr(obj, '__name__', where)}, called as {_call_text(getattr(obj, '__name__', 'NAME'), init)} -> {type(made).__name__}", made.forward)
    return Callee(obj, None, f"function {getattr(obj, '__name__', where)}, called with the inputs", obj)


@contextlib.contextmanager
def seeded(seed: int | None) -> Iterator[int]:
    """One seeded copy of torch's RNG state (`seed`, or one drawn): the initialisation, the
    random inputs and forward's own randomness (dropout) inside it repeat with `--seed`."""
    import torch

    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield seed


def made(obj: Any, where: str, init: Sequence[str], *, dtype: str | None = None, device: str = "cpu") -> Callee:
    """THE making of a model from the model options: `obj` resolved with `--init` (its texts
    read here), its model converted to `--dtype` (None keeps its own) and moved to `--device`.
    Run it inside the seeded block (targets/model.py's `seeded`), so the weights repeat."""
    callee = resolve(obj, where, parse_init(init))
    if callee.model is not None and dtype is not None:
        from ..interpret.variables import resolve_dtype

        callee.model.to(resolve_dtype(dtype))
    if callee.model is not None and device != "cpu":
        from ..interpret.variables import resolve_device

        callee.model.to(resolve_device(device))
    return callee


def parse_init(options: Sequence[str]) -> dict[str, Any]:
    """`--init KEY=VALUE` texts as keyword arguments; VALUE is a Python literal (literal_eval,
    never eval); a bare word that is not one is taken as a string."""
    init: dict[str, Any] = {}
    for option in options:
        key, sep, text = option.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise UsageError(f"--init '{option}' is not KEY=VALUE", hint="e.g. --init hidden=16 --init act=\"'relu'\"")
        try:
            init[key] = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            if not text.strip().isidentifier():
                raise UsageError(
                    f"--init {key}: '{text}' is not a Python literal",
                    hint="numbers, strings, True/False/None, tuples and lists: --init sizes=(3,4)",
                ) from None
            init[key] = text.strip()  # --init act=relu reads as the string 'relu'
    return init


def _required(fn: Any) -> list[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ["?"]
    return [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _function_signature(cls: type) -> Any:
    """forward's signature without ctx, as a callable inspect can read."""
    params = list(inspect.signature(cls.forward).parameters.values())[1:]  # type: ignore[attr-defined]

    def apply(*args: Any) -> Any: ...

    apply.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    apply.__name__ = f"{cls.__name__}.apply"
    return apply


def call_user(fn: Any, init: dict[str, Any], where: str, doing: str) -> Any:
    try:
        return fn(**init)
    except (Exception, SystemExit) as err:
        raise user_error(f"{doing} {where} as {_call_text(getattr(fn, '__name__', 'NAME'), init)} raised", err) from None


def _call_text(name: str, init: dict[str, Any]) -> str:
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in init.items()) + ")"


def describe(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__
