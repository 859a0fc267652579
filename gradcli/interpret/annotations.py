"""What a parameter takes, as its annotation (then its default) says: a floating tensor, an
integer or bool tensor (data), an int, a float, a bool, or anything.

check-function types every argument of a Function's forward this way (verify/function/
inputs.py), and the model commands read an integer list for a parameter annotated
`torch.LongTensor` (transformers' `input_ids: Optional[torch.LongTensor]`) as token ids.
Annotations may be objects or, under `from __future__ import annotations`, their text.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch


class ArgKind(Enum):
    """What forward's parameter takes, as its annotation or default says."""

    TENSOR = "tensor"  # a floating tensor: differentiated
    INTEGER_TENSOR = "integer tensor"  # indices, targets: data
    BOOL_TENSOR = "bool tensor"  # a mask: data
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    ANY = "any"  # nothing says: a --var is a tensor, a default is passed as it is


@dataclass(frozen=True)
class ArgType:
    kind: ArgKind
    optional: bool = False  # Optional[...] or a None default: None is a value it takes
    why: str = "no annotation and no default"
    floating: bool = False  # annotated a floating tensor type by name (torch.FloatTensor): never integers


#: Annotation names (the last dotted part, as written or as the class is named) -> kind.
_ANNOTATIONS = {
    "Tensor": ArgKind.TENSOR, "FloatTensor": ArgKind.TENSOR, "DoubleTensor": ArgKind.TENSOR,
    "LongTensor": ArgKind.INTEGER_TENSOR, "IntTensor": ArgKind.INTEGER_TENSOR,
    "BoolTensor": ArgKind.BOOL_TENSOR, "int": ArgKind.INT, "float": ArgKind.FLOAT, "bool": ArgKind.BOOL,
}
_FLOATING = ("FloatTensor", "DoubleTensor")
_OPTIONAL = re.compile(r"^(?:typing\.)?Optional\[(.*)\]$")


def argument_type(parameter: inspect.Parameter, annotation: Any = inspect.Parameter.empty) -> ArgType:
    """The type of one of forward's parameters: its annotation decides, else its default."""
    annotation = parameter.annotation if annotation is inspect.Parameter.empty else annotation
    default = parameter.default
    kind, optional = _from_annotation(annotation)
    optional = optional or default is None
    if kind is not None:
        text = _annotation_text(annotation)
        return ArgType(kind, optional, f"annotated {text}", floating=any(name in text for name in _FLOATING))
    if isinstance(default, bool):
        return ArgType(ArgKind.BOOL, optional, f"default {default!r}")
    if isinstance(default, int):
        return ArgType(ArgKind.INT, optional, f"default {default!r}")
    if isinstance(default, float):
        return ArgType(ArgKind.FLOAT, optional, f"default {default!r}")
    if isinstance(default, torch.Tensor):
        return ArgType(_tensor_kind(default), optional, "a tensor default")
    why = "default None" if default is None else "no annotation and no default"
    return ArgType(ArgKind.ANY, optional, why)


def _from_annotation(annotation: Any) -> tuple[ArgKind | None, bool]:
    """(kind, optional) from an annotation object or its text (`from __future__ import annotations`)."""
    if annotation is inspect.Parameter.empty:
        return None, False
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        optional = False
        match = _OPTIONAL.match(text)
        if match:
            text, optional = match[1], True
        parts = [part for part in text.split("|") if part != "None"]
        optional = optional or len(parts) < len(text.split("|"))
        kinds = {_ANNOTATIONS.get(part.rpartition(".")[2]) for part in parts}
        return (kinds.pop() if len(kinds) == 1 else None), optional
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        kinds = {_from_annotation(a)[0] for a in members}
        return (kinds.pop() if len(kinds) == 1 else None), len(members) < len(typing.get_args(annotation))
    return _ANNOTATIONS.get(getattr(annotation, "__name__", "")), False


def _annotation_text(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None) or repr(annotation)


def _tensor_kind(tensor: torch.Tensor) -> ArgKind:
    if tensor.dtype == torch.bool:
        return ArgKind.BOOL_TENSOR
    return ArgKind.TENSOR if tensor.is_floating_point() else ArgKind.INTEGER_TENSOR
