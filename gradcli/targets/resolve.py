"""From what a caller hands `trace` (text, a module, a function) to a Target."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import UsageError
from ..interpret.var_spec import VarSpec, read_vars
from .code import CodeTarget
from .expression import ExpressionTarget
from .load import is_code_target
from .spec import ModelSpec


def as_target(
    target: Any, inputs: Sequence[Any], named: dict[str, Any] | None = None, *, loss: Any = None, init: Sequence[str] = (),
    library_dirs: Sequence[str | Path] = (), loss_init: Sequence[str] = (),
) -> Any:
    """A Target for `target`; `inputs` are --var texts (text targets) or values (objects)."""
    named = named or {}
    if named and (isinstance(target, str) or not callable(target)):
        raise UsageError(f"unknown option(s): {', '.join(named)}", hint="inputs by name go with a module or a function")
    if hasattr(target, "build") and not callable(target):
        return target  # already a Target
    if isinstance(target, str):
        texts = [text for group in inputs for text in _var_group(group)]
        if not all(isinstance(text, (str, VarSpec)) for text in texts):
            raise UsageError("a target given as text takes its inputs as --var texts ('x=randn(3)') "
                             "or a dict ({'x': 'randn(3)'})")
        if is_code_target(target):
            return CodeTarget(ModelSpec.of(target.strip(), texts, init=init, loss=loss, loss_init=loss_init,
                                           library_dirs=library_dirs))
        if loss is not None or init or loss_init:
            raise UsageError("--loss, --loss-init and --init apply to code (model.py:NAME), not to an expression")
        return ExpressionTarget(target, texts, library_dirs)
    if callable(target):
        return CodeTarget(ModelSpec.of("", init=init, loss=loss, loss_init=loss_init, library_dirs=library_dirs),
                          obj=target, values=tuple(inputs), named_values=dict(named))
    raise UsageError(f"cannot trace a {type(target).__name__}", hint="give an expression, model.py:NAME, an nn.Module or a function")


def _var_group(group: Any) -> Sequence[Any]:
    """One argument's inputs for a text target: a --var text, a list of them, or a dict by name
    (parsed here, once: {"x": 0.5} as --var x=0.5 would be)."""
    if isinstance(group, str):
        return [group]
    if isinstance(group, Mapping):
        return list(read_vars(group).values())
    return group
