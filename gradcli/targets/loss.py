"""What reduces a model's output to the one number backward starts from: `--loss`.

Three forms, one interface (`Loss.names`, `Loss.apply`), so trace, grads and the Python API
never ask which:

- an expression in gradcli's language (`--loss "cross_entropy(out.logits.flatten(0, 1), y.flatten())"`):
  `out` is the output as the model returned it (`out.logits`, `out[0]`, `out["loss"]`), and
  also, used as a tensor, the output tensor (a tuple's first item); the tensors of the output
  by name (targets/outputs.py) and the inputs are bound too;
- the user's own code, `--loss path/loss.py:NAME` or `--loss package.module:NAME`, loaded as
  targets are (targets/load.py): a callable `NAME(out, **vars)` gets the output as returned and
  the inputs its signature names; an nn.Module loss class (`torch.nn:CrossEntropyLoss`) is
  constructed with `--loss-init KEY=VALUE` and called as `loss(out, target, ...)`, its other
  parameters bound by name to `--var` values;
- a Python callable (the API's `loss=fn`), called as the code form is.

The user's loss runs under its own ForwardRecorder, so its nodes carry its file and line as the
model's do, and what it raises is shown in the user's own frames.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import GradcliError, UsageError


@dataclass
class Loss:
    """A loss, given as text (expression or FILE:NAME) or as a callable; loaded on first use."""

    given: Any
    init: Sequence[str] = ()
    library_dirs: Sequence[str | Path] = ()
    _loaded: Any = field(default=None, repr=False)

    @property
    def is_code(self) -> bool:
        from .load import is_code_target

        return not isinstance(self.given, str) or is_code_target(self.given)

    @property
    def where(self) -> str:
        if isinstance(self.given, str):
            return self.given.strip()
        return getattr(self.given, "__qualname__", None) or type(self.given).__name__

    def names(self) -> list[str]:
        """The names the loss reads besides the output (--var values it takes: labels, ids)."""
        if not self.is_code:
            from ..pipeline import load

            try:
                return list(load(self.given, self.library_dirs)[0].variables)
            except GradcliError as err:
                raise _in_loss(err, self.given) from None
        return list(_parameters(self.callable(), self.where)[1:])

    def callable(self) -> Any:
        """The user's loss, loaded (and, for an nn.Module class, constructed) once."""
        if self._loaded is None:
            self._loaded = _load(self.given, self.init, self.where)
        return self._loaded

    def apply(self, output: Any, outputs: dict[str, Any], inputs: dict[str, Any]) -> tuple[Any, list[tuple[str, Any]]]:
        """(the loss value, its named intermediates) for the model's `output` as returned,
        its tensors by name (`outputs`) and the tensor inputs by name."""
        if not self.is_code:
            return _expression(self.given, output, outputs, inputs, self.library_dirs)
        return _code(self.callable(), self.where, output, inputs), []


def as_loss(loss: Any, init: Sequence[str] = (), library_dirs: Sequence[str | Path] = ()) -> Loss | None:
    """A Loss for what the caller gave (None: the output is the loss); `init` is --loss-init."""
    if loss is None:
        if init:
            raise UsageError("--loss-init constructs a loss class named by --loss", hint="e.g. --loss torch.nn:CrossEntropyLoss --loss-init ignore_index=0")
        return None
    if isinstance(loss, Loss):
        return loss
    made = Loss(loss, tuple(init), tuple(library_dirs))
    if init and not made.is_code:
        raise UsageError("--loss-init constructs a loss class named by --loss, not an expression",
                         hint="e.g. --loss torch.nn:CrossEntropyLoss --loss-init ignore_index=0")
    if isinstance(loss, str) and made.is_code:
        made.callable()  # a missing file or name is an error before forward runs
    elif not isinstance(loss, str) and not callable(loss):
        raise UsageError(f"loss must be an expression or a callable, not a {type(loss).__name__}")
    return made


def _load(given: Any, init: Sequence[str], where: str) -> Any:
    import torch

    from .construct import call_user, parse_init
    from .load import load_object

    obj = load_object(given)[0] if isinstance(given, str) else given
    try:
        options = parse_init(init)
    except UsageError as err:  # in forward's words (--init): the option and its example are the loss's
        err.message = err.message.replace("--init", "--loss-init", 1)
        err.hint = ("KEY=VALUE, VALUE a Python literal (numbers, strings, True/False/None, tuples, lists): "
                    "e.g. --loss-init ignore_index=0 --loss-init reduction=\"'sum'\"")
        raise
    if inspect.isclass(obj) and issubclass(obj, torch.nn.Module):
        return call_user(obj, options, where, "constructing the loss")
    if init:
        raise UsageError(f"--loss-init applies to an nn.Module loss class; {where} is {_kind(obj)}",
                         hint="drop --loss-init, or give the arguments through --var")
    if inspect.isclass(obj) or not callable(obj):
        raise UsageError(f"--loss {where} is {_kind(obj)}: give a function NAME(out, **vars) or an nn.Module loss class",
                         hint="e.g. --loss losses.py:shifted_loss or --loss torch.nn:CrossEntropyLoss")
    return obj


def _kind(obj: Any) -> str:
    return f"the class {obj.__name__}" if inspect.isclass(obj) else f"a {type(obj).__name__}"


def _parameters(fn: Any, where: str) -> list[str]:
    """The loss's parameter names, the output's first; `**kwargs` adds none (it takes all)."""
    target = fn.forward if hasattr(fn, "forward") and not inspect.isfunction(fn) else fn
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        raise UsageError(f"cannot read the signature of the loss {where}") from None
    named = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not named and not any(p.kind == p.VAR_POSITIONAL for p in params):
        raise UsageError(f"the loss {where} takes no argument: it is called as NAME(out, **vars)")
    return [p.name for p in named]


def _code(fn: Any, where: str, output: Any, inputs: dict[str, Any]) -> Any:
    import torch

    from .load import users_code
    from .record import ForwardRecorder

    names = _parameters(fn, where)  # first: a loss without a readable signature is a usage error
    target = fn.forward if hasattr(fn, "forward") and not inspect.isfunction(fn) else fn
    params = list(inspect.signature(target).parameters.values())
    takes_all = any(p.kind == p.VAR_KEYWORD for p in params)
    kwargs = {name: inputs[name] for name in names[1:] if name in inputs}
    if takes_all:
        kwargs.update({name: value for name, value in inputs.items() if name not in kwargs and name not in names[:1]})
    missing = [p.name for p in params[1:] if p.name not in kwargs and p.default is p.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if missing:
        raise UsageError(f"the loss {where} needs '{missing[0]}'", hint=f"give it with --var, e.g. --var '{missing[0]}=randint(0, 10, (8,))'")
    # Its own recorder: the loss's nodes carry its file and line, as forward's do.
    with users_code(f"the loss {where}"), ForwardRecorder({}):
        value = fn(output, **kwargs)
    if not isinstance(value, torch.Tensor):
        raise UsageError(f"the loss {where} returned a {type(value).__name__}, not a tensor",
                         hint="return the loss tensor (a scalar) that backward starts from")
    return value


def _expression(text: str, output: Any, outputs: dict[str, Any], inputs: dict[str, Any],
                library_dirs: Sequence[str | Path]) -> tuple[Any, list[tuple[str, Any]]]:
    from ..interpret.fields import is_structure, names_in
    from ..interpret.to_torch import build
    from ..pipeline import load

    try:
        program, library = load(text, library_dirs)
    except GradcliError as err:
        raise _in_loss(err, text) from None
    env = {**inputs, **outputs}
    structured = {"out": output} if is_structure(output) else {}
    missing = [name for name in program.variables if name not in env and name not in structured]
    if missing:
        shown = ", ".join([*env, *(["out"] if structured and "out" not in env else [])])
        fields = names_in(output) if structured else []
        raise UsageError(
            f"--loss uses '{missing[0]}', which is neither an output nor an input",
            hint=f"names here: {shown}" + (f"; the output's fields: out.{', out.'.join(fields)}" if fields else ""),
        )
    try:
        built = build(program, {name: env[name] for name in program.variables if name in env}, library=library,
                      structured=structured)
    except GradcliError as err:
        raise _in_loss(err, text) from None
    return built.output, built.bindings


def _in_loss(err: GradcliError, text: str) -> GradcliError:
    """The error points into the --loss text, and says so."""
    if err.source is None or err.source == text:
        err.source, err.what = text, "--loss"
    return err
