"""Reading a model's output by name, as the user's training code does: `out.logits`,
`out.loss`, `out["logits"]`, `out[0]`, `out.hidden_states[-1]`.

A model returns a tensor, a tuple or list, a dict, a dataclass, a namedtuple, or transformers'
`ModelOutput` (an OrderedDict subclass whose fields are also attributes, holding only the
fields that are not None). The torch builder asks this module for one part of such a value;
a name that is not there is an error that lists the names that are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..errors import Span, UnknownNameError


def is_structure(value: Any) -> bool:
    """Whether `value` is a container of a model's outputs rather than a tensor or number."""
    return isinstance(value, (tuple, list, Mapping)) or (dataclasses.is_dataclass(value) and not isinstance(value, type))


def names_in(value: Any) -> list[str]:
    """The names a structured output answers to, in its own order."""
    if isinstance(value, Mapping):
        return [str(k) for k in value.keys()]
    if hasattr(value, "_fields"):  # a namedtuple
        return list(value._fields)
    if dataclasses.is_dataclass(value):
        return [f.name for f in dataclasses.fields(value)]
    return []


def describe(value: Any) -> str:
    """A structured output in a few words: `a CausalLMOutput with logits, past_key_values`."""
    kind = type(value).__name__
    names = names_in(value)
    if names:
        return f"a {kind} with " + ", ".join(names)
    if isinstance(value, (tuple, list)):
        return f"a {kind} of {len(value)} item{'s' if len(value) != 1 else ''} (out[0] ... out[{len(value) - 1}])"
    return f"a {kind}"


def field(value: Any, name: str, *, key: bool, span: Span | None, written: str) -> Any:
    """`value.name` (or `value["name"]` when `key`): a dict's key, a dataclass's field, a
    ModelOutput's either; the error lists what there is."""
    if isinstance(value, Mapping) and name in value:
        return value[name]
    if not key and not isinstance(value, Mapping) and name in names_in(value):
        return getattr(value, name)
    if not key and isinstance(value, Mapping) and dataclasses.is_dataclass(value) and hasattr(value, name):
        found = getattr(value, name)
        if found is not None:
            return found
        raise UnknownNameError(
            f"{written} is None: {describe(value)}", span=span,
            hint=f"a transformers model computes {name} only when given what it needs (out.loss: labels=...)",
        )
    if is_structure(value):
        names = names_in(value)
        raise UnknownNameError(
            f"the output has no {'key ' + repr(name) if key else 'field ' + repr(name)}: it is {describe(value)}",
            span=span,
            hint=("did you mean one of: " + ", ".join(names)) if names else "pick an item by position: out[0]",
        )
    kind = type(value).__name__
    raise UnknownNameError(
        f"{written}: a {kind} has no field '{name}'", span=span,
        hint="fields are parts of a model's output (out.logits); a tensor's shape ops are methods: x.reshape(...)",
    )


def item(value: Any, index: tuple[Any, ...], span: Span | None) -> Any:
    """`value[i]` for a tuple or list output (or a chunk/split result): one integer only."""
    if isinstance(value, Mapping):
        raise UnknownNameError(f"the output is {describe(value)}: pick a part by name", span=span,
                               hint=f"e.g. out[{names_in(value)[0]!r}]" if names_in(value) else None)
    if len(index) != 1 or not isinstance(index[0], int) or isinstance(index[0], bool):
        raise UnknownNameError(f"{describe(value)} is indexed by one integer, out[0]", span=span)
    try:
        return value[index[0]]
    except IndexError:
        raise UnknownNameError(f"index {index[0]} is out of range: the output is {describe(value)}", span=span) from None
