"""gradcli: inspect and check PyTorch autograd from the shell, or from Python.

    >>> import gradcli
    >>> result = gradcli.check("x*sigmoid(x)")
    >>> result.ok
    True

The public functions are imported lazily, so `import gradcli` (and `gradcli --help`) does
not pay for torch or sympy.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"
__all__ = ["parse", "build", "to_sympy", "trace", "check", "check_function", "grads", "compare", "memory",
           "watch", "WatchStop", "GradcliError"]

_LAZY = {
    "parse": ("gradcli.pipeline", "parse"),
    "build": ("gradcli.interpret.to_torch", "build"),
    "to_sympy": ("gradcli.interpret.to_sympy", "to_sympy"),
    "trace": ("gradcli.api", "trace"),
    "check": ("gradcli.api", "check"),
    "check_function": ("gradcli.api", "check_function"),
    "grads": ("gradcli.api", "grads"),
    "memory": ("gradcli.api", "memory"),
    "compare": ("gradcli.api", "compare"),
    "watch": ("gradcli.watcher.api", "watch"),
    "WatchStop": ("gradcli.watcher.result", "WatchStop"),
    "GradcliError": ("gradcli.errors", "GradcliError"),
}


def __getattr__(name: str) -> Any:
    if name == "callbacks":  # the trainer callbacks' package: `gradcli.callbacks.LightningCallback()`
        return import_module("gradcli.callbacks")
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'gradcli' has no attribute {name!r}") from None
    return getattr(import_module(module), attr)


def __dir__() -> list[str]:
    return sorted(__all__)
