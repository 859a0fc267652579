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
import sys
from types import ModuleType
from typing import Any

__version__ = "0.1.0"
__all__ = ["parse", "build", "to_sympy", "trace", "check", "check_function", "grads", "compare", "GradcliError"]

_LAZY = {
    "parse": ("gradcli.pipeline", "parse"),
    "build": ("gradcli.build.to_torch", "build"),
    "to_sympy": ("gradcli.build.to_sympy", "to_sympy"),
    "trace": ("gradcli.api", "trace"),
    "check": ("gradcli.api", "check"),
    "check_function": ("gradcli.api", "check_function"),
    "grads": ("gradcli.api", "grads"),
    "compare": ("gradcli.api", "compare"),
    "GradcliError": ("gradcli.errors", "GradcliError"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'gradcli' has no attribute {name!r}") from None
    return getattr(import_module(module), attr)


def __dir__() -> list[str]:
    return sorted(__all__)


class _CallablePackage(ModuleType):
    """`gradcli.compare` names both the library folder gradcli/compare/ and the function
    `gradcli.compare(model, x, compile=True)`: once the folder is imported, Python binds the
    name to the package, so the package is made callable, as that function (gradcli.api's)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return import_module("gradcli.api").compare(*args, **kwargs)


def callable_package(name: str) -> None:
    """Make the package `name` callable as `gradcli.api`'s function of the same last name."""
    sys.modules[name].__class__ = _CallablePackage
