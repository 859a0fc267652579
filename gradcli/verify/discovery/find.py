"""Finding every torch.autograd.Function that a package, module, file or folder defines.

`check-function mypkg` (no `:NAME`) checks all of a project's Functions at once, so that CI
can run it over the whole project. Importing runs the code, as `import mypkg` would. The
submodules are found with pkgutil and imported one by one; a class counts only in the module
that defines it (its `__module__`), so a Function re-imported into a second module, or from
torch or another package, is not checked twice or at all. A Function with no forward of its
own is an abstract base: listed as skipped, not checked. A submodule that raises on import
is reported with its error rather than stopping the walk, and the walk fails: the Functions
it hides went unchecked. A submodule that needs another package this machine lacks (timm's
modules that import tensorflow or `datasets`) is an optional dependency missing: a note
(`missing`), not a failure; a module of the package itself that is missing still fails.
"""

from __future__ import annotations

import fnmatch
import pkgutil
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable, Literal, Sequence

import torch

from ...errors import GradcliError, UsageError
from ...targets.load import import_code
from ..function.userfile import is_function_class

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
Kind = Literal["package", "module"]
_WHAT = "give a package or module (mypkg.ops), a file (ops.py), a folder, or PATH.py:NAME for one Function"
#: How a found thing is named: (module name, class qualname or None for the module) -> name.
Naming = Callable[[str, "str | None"], str]


@dataclass(frozen=True)
class Found:
    """A Function to check: `name` is how to check it alone (`mypkg.ops:Swish`)."""

    name: str
    cls: type


@dataclass(frozen=True)
class Passed:
    """Something found and not checked, and why (an abstract base, `--skip`, torch's own)."""

    name: str
    reason: str


@dataclass
class Discovered:
    """What a package walk found: Functions to check, the ones passed over, broken modules."""

    kind: Kind
    description: str
    functions: list[Found] = field(default_factory=list)
    skipped: list[Passed] = field(default_factory=list)
    unimportable: list[Passed] = field(default_factory=list)  # module name, the import error
    missing: list[Passed] = field(default_factory=list)  # module name, the dependency it lacks


def is_discovery_target(target: str) -> bool:
    """A package, module, file or folder (no `:NAME`): check every Function it defines."""
    return ":" not in target


def find_functions(target: str, skip: Sequence[str] = ()) -> Discovered:
    """Every Function `target` defines, in module order, then definition order."""
    target = target.strip().rstrip("/") or target
    root, naming = _import_root(target)
    modules: list[ModuleType] = []
    unimportable: list[Passed] = []
    missing: list[Passed] = []
    _walk(root, naming, modules, unimportable, missing)
    kind: Kind = "package" if hasattr(root, "__path__") else "module"
    count = len(modules) + len(unimportable) + len(missing)
    described = f"package {root.__name__}, {count} module{'s' if count != 1 else ''}" if kind == "package" else f"module {root.__name__}"
    found = Discovered(kind, described, unimportable=unimportable, missing=missing)
    seen: set[type] = set()
    for module in modules:
        for value in list(vars(module).values()):
            if not is_function_class(value) or value.__module__ != module.__name__ or value in seen:
                continue  # not a Function, one defined elsewhere and imported here, or an alias
            seen.add(value)
            name = naming(module.__name__, value.__qualname__)
            if value.forward is torch.autograd.Function.forward:
                found.skipped.append(Passed(name, "no forward of its own: an abstract base"))
            elif skipped_by(name, value, skip):
                found.skipped.append(Passed(name, "--skip"))
            else:
                found.functions.append(Found(name, value))
    return found


def _walk(module: ModuleType, naming: Naming, modules: list[ModuleType], unimportable: list[Passed],
          missing: list[Passed]) -> None:
    """`module` and its submodules, depth first in pkgutil's order. Each is imported here
    (not by pkgutil.walk_packages, which lets a SystemExit from the user's code through), so
    an error in one becomes that module's entry and the walk goes on."""
    modules.append(module)
    for info in pkgutil.iter_modules(getattr(module, "__path__", []), module.__name__ + "."):
        try:
            sub = import_code(info.name)
        except GradcliError as err:
            dependency = _missing_dependency(err, info.name)
            if dependency is not None:
                missing.append(Passed(naming(info.name, None), dependency))
            else:
                unimportable.append(Passed(naming(info.name, None), err.message))
            continue
        _walk(sub, naming, modules, unimportable, missing)


def _missing_dependency(err: GradcliError, module: str) -> str | None:
    """The package a module needs and this machine lacks (ModuleNotFoundError for a module
    outside the walked package), or None: a module of the package itself is not optional."""
    name = getattr(err, "missing_module", None)
    if not name:
        return None
    return None if name.partition(".")[0] == module.partition(".")[0] else name


def skipped_by(name: str, cls: type, patterns: Sequence[str]) -> bool:
    """Whether a --skip pattern matches the Function's full name or its class name."""
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(cls.__qualname__, p) for p in patterns)


def _import_root(target: str) -> tuple[ModuleType, Naming]:
    """The module `target` names, and how to name what is found in it (as the user wrote
    the target: a path for a path, a dotted name for a module)."""
    path = Path(target)
    if target.endswith(".py"):
        if not path.is_file():
            raise UsageError(f"no file '{target}'", hint=_WHAT)
        module = import_code(target)
        return module, lambda _module, qualname: f"{target}:{qualname}"
    if path.is_dir():
        module = _import_folder(path)
        base = path.resolve()

        def in_folder(module_name: str, qualname: str | None) -> str:
            parts = module_name.split(".")[1:]
            inside = base.joinpath(*parts)
            file = inside / "__init__.py" if inside.is_dir() else inside.with_suffix(".py")
            shown = path.joinpath(file.relative_to(base)).as_posix()
            return shown if qualname is None else f"{shown}:{qualname}"

        return module, in_folder
    if _DOTTED.match(target):
        return import_code(target), lambda module_name, qualname: module_name if qualname is None else f"{module_name}:{qualname}"
    raise UsageError(f"'{target}' is no module, file or folder", hint=_WHAT)


def _import_folder(path: Path) -> ModuleType:
    """A folder imported as the package it is, its parent first on sys.path (so its own
    absolute and relative imports work, as they would from the parent folder)."""
    folder = path.resolve()
    name = folder.name
    if not name.isidentifier():
        raise UsageError(f"the folder '{path}' is not a Python package name", hint="give the module name, or one file")
    existing = sys.modules.get(name)
    if existing is not None and [str(Path(p).resolve()) for p in getattr(existing, "__path__", [])] != [str(folder)]:
        raise UsageError(f"a module named '{name}' is already imported from elsewhere, so the folder '{path}' cannot be",
                         hint="rename the folder, or give its modules as files")
    parent = str(folder.parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    return import_code(name)

