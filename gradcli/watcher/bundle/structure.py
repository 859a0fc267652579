"""A replay bundle as data: what `torch.load(..., weights_only=True)` reads, no pickle of objects.

A pickled model runs whatever its pickle names when it is loaded, so a bundle someone sent
could run anything; and finding the model's classes meant running the training script, whose
loop may sit at top level. Here every value is written as plain data (numbers, strings,
lists, tuples, dicts, tensors, dtypes) that the weights-only unpickler accepts. An object
(a module, a config) becomes a tagged dict: its class's name, its attributes as data, and for
an `nn.Module` its parameters, buffers and submodules; a function or class it holds becomes
its name. Tensors are kept once each in a list, so that a parameter shared by two modules (tied
embeddings) is one parameter again when read back.

Reading it back (`decode`) names classes and functions through a resolver: the script's own
definitions (script.definitions: its imports, classes and functions, never its other top-level
statements) for `__main__`, importlib otherwise. It makes each object with `cls.__new__` and
sets its attributes: no constructor, no `__reduce__`, nothing of the bundle's runs as code.
A value that is none of these (a lambda, an open file, a C object) cannot be stored:
`Unstorable` names where it is.

XXX a class named in a bundle is imported to be found: its module's import-time code runs, as
`import` would run it.
"""

from __future__ import annotations

import collections
import enum
import importlib
import sys
import types
from typing import Any, Callable

import torch

from ...errors import UsageError

_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)
_DEPTH = 64  # nesting beyond this is a cycle or not a model


class Unstorable(ValueError):
    """A value in the step that is not data (a lambda, an open file, a C object): where it is."""


class BundleError(UsageError):
    """A bundle whose models cannot be rebuilt from the script's definitions (what is missing)."""


class Encoder:
    """`encode(value)` -> data; `tensors` holds each tensor once (by identity)."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self._tensor_ids: dict[Any, int] = {}
        self._object_ids: dict[int, int] = {}
        self._kept: list[Any] = []  # the objects memoised by id stay alive while encoding

    def encode(self, value: Any, where: str = "value", depth: int = 0) -> Any:
        if depth > _DEPTH:
            raise Unstorable(f"{where} nests deeper than {_DEPTH} levels")
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if type(value) in _PLAIN:
            return value
        if type(value) in (list, tuple, set, frozenset):
            items = [self.encode(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
            return {"t": type(value).__name__, "items": items}
        if type(value) in (dict, collections.OrderedDict):
            return {"t": "dict", "items": [[self.encode(k, f"{where} key", depth + 1),
                                            self.encode(v, f"{where}[{k!r}]", depth + 1)] for k, v in value.items()]}
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
            return {"t": "named", "class": _name_of(value.__class__, where),
                    "items": [self.encode(v, f"{where}.{f}", depth + 1) for f, v in zip(value._fields, value)]}
        if isinstance(value, enum.Enum):
            return {"t": "enum", "class": _name_of(type(value), where), "value": self.encode(value.value, where, depth + 1)}
        if isinstance(value, types.MethodType):  # self.act = self.other_method
            return {"t": "method", "self": self.encode(value.__self__, f"{where}.__self__", depth + 1),
                    "name": value.__func__.__name__}
        if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType)):
            return {"t": "ref", "name": _name_of(value, where)}
        return self._object(value, where, depth)

    def _tensor(self, tensor: torch.Tensor) -> dict[str, Any]:
        key = _same_values(tensor)
        index = self._tensor_ids.get(key)
        if index is None:
            index = self._tensor_ids[key] = len(self.tensors)
            self.tensors.append(tensor.detach().clone())
            self._kept.append(tensor)
        node: dict[str, Any] = {"t": "tensor", "i": index}
        if isinstance(tensor, torch.nn.Parameter):
            node["param"], node["requires_grad"] = True, tensor.requires_grad
        return node

    def _object(self, value: Any, where: str, depth: int) -> dict[str, Any]:
        seen = self._object_ids.get(id(value))
        if seen is not None:
            return {"t": "obj", "id": seen}
        state = getattr(value, "__dict__", None)
        if state is None:
            raise Unstorable(f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which is not data")
        index = self._object_ids[id(value)] = len(self._object_ids)
        self._kept.append(value)
        node: dict[str, Any] = {"t": "obj", "id": index, "class": _name_of(type(value), where)}
        if isinstance(value, torch.nn.Module):
            internal = _module_keys()
            node["module"] = {
                "parameters": {k: self.encode(p, f"{where}.{k}", depth + 1) for k, p in value._parameters.items()},
                "buffers": {k: self.encode(b, f"{where}.{k}", depth + 1) for k, b in value._buffers.items()},
                "non_persistent": sorted(value._non_persistent_buffers_set),
                "modules": {k: self.encode(m, f"{where}.{k}", depth + 1) for k, m in value._modules.items()},
            }
            state = {k: v for k, v in state.items() if k not in internal or k == "training"}
        node["state"] = {k: self.encode(v, f"{where}.{k}", depth + 1) for k, v in state.items()}
        return node


def decode(data: Any, tensors: list[torch.Tensor], resolve: Callable[[str], Any]) -> Any:
    """The values `Encoder.encode` wrote, with classes and functions found by `resolve`."""
    objects: dict[int, Any] = {}
    params: dict[int, torch.nn.Parameter] = {}

    def build(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        kind = node["t"]
        if kind == "tensor":
            tensor = tensors[node["i"]]
            if not node.get("param"):
                return tensor
            if node["i"] not in params:
                params[node["i"]] = torch.nn.Parameter(tensor, requires_grad=node["requires_grad"])
            return params[node["i"]]
        if kind in ("list", "tuple", "set", "frozenset"):
            items = [build(v) for v in node["items"]]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
        if kind == "dict":
            return {build(k): build(v) for k, v in node["items"]}
        if kind == "named":
            return resolve(node["class"])(*[build(v) for v in node["items"]])
        if kind == "ref":
            return resolve(node["name"])
        if kind == "enum":
            return resolve(node["class"])(build(node["value"]))
        if kind == "method":
            return getattr(build(node["self"]), node["name"])
        if kind == "obj":
            if "class" not in node:
                return objects[node["id"]]
            cls = resolve(node["class"])
            if not isinstance(cls, type):
                raise BundleError(f"the bundle names {node['class']} as a class, and it is a {type(cls).__name__}")
            obj = objects[node["id"]] = cls.__new__(cls)
            if "module" in node:
                torch.nn.Module.__init__(obj)
                parts = node["module"]
                for name, value in parts["parameters"].items():
                    obj._parameters[name] = build(value)
                for name, value in parts["buffers"].items():
                    obj._buffers[name] = build(value)
                obj._non_persistent_buffers_set.update(parts["non_persistent"])
                for name, value in parts["modules"].items():
                    obj._modules[name] = build(value)
            obj.__dict__.update({k: build(v) for k, v in node["state"].items()})
            return obj
        raise BundleError(f"the bundle holds a value of unknown kind {kind!r}: not a gradcli bundle")

    return build(data)


def resolver(definitions: Callable[[], dict[str, Any]]) -> Callable[[str], Any]:
    """`module:qualname` -> the object: `__main__`'s from `definitions()` (asked once, when first
    needed), other modules' imported."""
    found: dict[str, Any] = {}

    def resolve(name: str) -> Any:
        module, _, qualname = name.partition(":")
        if module == "__main__":
            if "main" not in found:
                found["main"] = definitions()
            value: Any = found["main"]
            parts = qualname.split(".")
            if parts[0] not in value:
                raise BundleError(f"the bundle's model needs {parts[0]}, which is not among the training script's "
                                  "definitions (its imports, classes and functions): define it at the script's top "
                                  "level, not inside a function or under `if __name__ == \"__main__\":`")
            value = value[parts[0]]
            rest = parts[1:]
        else:
            try:
                value = importlib.import_module(module)
            except ImportError as err:
                raise BundleError(f"the bundle's model needs the module {module}, which cannot be imported: {err}") from None
            rest = qualname.split(".")
        for part in rest:
            try:
                value = getattr(value, part)
            except AttributeError:
                raise BundleError(f"the bundle's model needs {name}, which {module} does not define") from None
        return value

    return resolve


def _same_values(tensor: torch.Tensor) -> Any:
    """What makes two tensor objects one (a parameter and its state_dict entry): the same
    storage, offset, shape, stride and dtype; the object itself when it has no plain storage."""
    try:
        return (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(),
                tensor.dtype, tensor.device)
    except (RuntimeError, NotImplementedError, TypeError):
        return id(tensor)


def _name_of(value: Any, where: str) -> str:
    """`module:qualname` of a class or function that can be found again by that name (checked
    against the module as it is now: `torch.tanh`'s qualname is `_VariableFunctionsClass.tanh`,
    found again as `torch:tanh`)."""
    module = getattr(value, "__module__", None)
    names = [n for n in (getattr(value, "__qualname__", None), getattr(value, "__name__", None)) if n]
    loaded = sys.modules.get(module) if module else None
    for name in names:
        if "<" in name:  # a lambda, a class made inside a function
            continue
        found: Any = loaded
        for part in name.split("."):
            found = getattr(found, part, None)
        if loaded is None or found is value:
            return f"{module}:{name}"
    raise Unstorable(f"{where} is {names[0] if names else type(value).__name__}, which cannot be found again by its "
                     "name (a lambda, or a class or function defined inside a function)")


_KEYS: set[str] = set()


def _module_keys() -> set[str]:
    """The attributes every nn.Module has (hooks, parameter and buffer tables): not the model's own."""
    if not _KEYS:
        _KEYS.update(torch.nn.Module().__dict__)
    return _KEYS
