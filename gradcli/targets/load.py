"""Finding the user's code: `path/to/model.py:NAME` or `package.module:NAME`, NAME dotted.

Importing a file runs it, exactly as `python path/to/model.py` would import it: its folder
goes first on sys.path so its own imports work. A file inside a package (a folder with
__init__.py) is imported as part of its package, as `python -m pkg.ops` would, so that its
relative imports work; `package.module` is looked for in the installed packages, then in the
current folder. Anything the user's code raises becomes a
`UserCodeError` (exit 2) showing only the user's own frames: file, line, the line's code and
the exception; gradcli's, torch's and importlib's frames are left out.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import linecache
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Iterator

from ..errors import GradcliError, UsageError, UserCodeError

_NAME = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
#: `file.py:NAME` (any path without spaces or colons) or `dotted.module:NAME`.
_CODE = re.compile(rf"^(?P<where>[^\s:]+\.py|{_NAME}):(?P<name>{_NAME})$")
#: Frames from these folders are gradcli's or torch's own, never the user's.
_NOT_USER = tuple(
    str(Path(p).resolve()) + "/" for p in (Path(__file__).parent.parent, Path(importlib.util.find_spec("torch").origin).parent)  # type: ignore[arg-type, union-attr]
)


def is_code_target(text: str) -> bool:
    """Whether `text` names code (`model.py:Net`, `torch.nn:Linear`) rather than an expression."""
    return _CODE.match(text.strip()) is not None


def refuse_bare_file(text: str) -> None:
    """A path to a .py file without :NAME means the user's code, never an expression (where it
    reads as attribute access): say what is missing instead of a parse error."""
    stripped = text.strip()
    if stripped.endswith(".py") and not stripped.startswith("@") and ":" not in stripped and " " not in stripped:
        raise UsageError(f"'{stripped}' is a file: name the model or function in it, {stripped}:NAME",
                         hint="e.g. examples/residual_mlp.py:ResidualMLP (a class, a factory or a function)")


def load_object(text: str) -> tuple[Any, str]:
    """The object `text` names, and where it was found (for messages)."""
    refuse_bare_file(text)
    match = _CODE.match(text.strip())
    if match is None:
        raise UsageError(f"'{text}' is not PATH.py:NAME or package.module:NAME", hint="e.g. examples/mlp.py:MLP or torch.nn:Linear")
    where, name = match["where"], match["name"]
    module = _import_file(Path(where)) if where.endswith(".py") else _import_module(where)
    value: Any = module
    for part in name.split("."):
        if not hasattr(value, part):
            raise UsageError(f"{where} has no '{name}'", hint=_candidates(module))
        value = getattr(value, part)
    return _function_of_apply(value), f"{where}:{name}"


def _function_of_apply(value: Any) -> Any:
    """`swish = Swish.apply`, as torch's documentation writes it, names the Function class:
    the bound builtin has no signature to bind inputs by, and the class has forward's."""
    import torch

    owner = getattr(value, "__self__", None)
    applies = getattr(value, "__name__", None) == "apply" and isinstance(owner, type)
    return owner if applies and issubclass(owner, torch.autograd.Function) else value


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise UsageError(f"no file '{path}'", hint="give the path of a .py file, then :NAME")
    package = package_of(path)
    if package is not None:
        # Not its own folder first on sys.path: `sparsemax/sparsemax.py` would then shadow the
        # `sparsemax` package it imports from, as `python -m sparsemax.sparsemax` never does.
        return _import_in_package(path, *package)
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    # Named after the file, as python names an imported file, unless that name is taken.
    module_name = path.stem
    existing = sys.modules.get(module_name)
    if existing is not None and getattr(existing, "__file__", None) == str(path.resolve()):
        return existing
    if existing is not None or not module_name.isidentifier():
        module_name = f"gradcli_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path.resolve())
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import '{path}' as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:  # the user's code: report it, do not crash
        sys.modules.pop(module_name, None)
        error = user_error(f"importing {path} raised", err)
        if isinstance(err, ImportError) and "no known parent package" in str(err):
            error.hint = (f"{path.name} uses a relative import, but {path.parent} has no __init__.py: "
                          "add one so that gradcli imports the file as part of its package")
        raise error from None
    return module


def package_of(path: Path) -> tuple[str, Path] | None:
    """For a file inside packages (folders with __init__.py): its dotted name (`pkg.sub.ops`)
    and the top package's folder; None for a file that is in no package."""
    path = path.resolve()
    parts = [] if path.stem == "__init__" else [path.stem]
    folder, top = path.parent, None
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        parts.insert(0, folder.name)
        folder, top = folder.parent, folder
    if top is None or not all(part.isidentifier() for part in parts):
        return None
    return ".".join(parts), top


def _import_in_package(path: Path, dotted: str, top: Path) -> Any:
    """A file inside a package is imported as part of it, as `python -m pkg.sub.ops` would:
    its relative imports (`from .util import f`) need the package, so the top package's parent
    folder goes first on sys.path and the file is imported under its dotted name."""
    if str(top.parent) not in sys.path:
        sys.path.insert(0, str(top.parent))
    package = dotted.partition(".")[0]
    found = getattr(sys.modules.get(package), "__file__", None)
    if package in sys.modules and (found is None or Path(found).resolve() != top / "__init__.py"):
        raise UsageError(
            f"{path} is in the package '{package}', but another '{package}' is already imported"
            + (f" from {Path(found).parent}" if found else ""),
            hint="rename one of the two packages",
        )
    return _import_module(dotted)


def _import_module(name: str) -> Any:
    # As `python -m` (and uvicorn, flask) find modules: the current folder too. Last, so an
    # installed package is never shadowed by a file that happens to be here.
    here = str(Path.cwd())
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and name.startswith(err.name):  # the module itself is missing
            raise UsageError(f"no module named '{err.name}'", hint="give an importable module, or a file: path/to/model.py:NAME") from None
        raise user_error(f"importing {name} raised", err) from None
    except (Exception, SystemExit) as err:
        raise user_error(f"importing {name} raised", err) from None


def _candidates(module: Any) -> str:
    import torch

    names = [
        key for key, value in vars(module).items()
        if not key.startswith("_") and getattr(value, "__module__", None) == module.__name__
        and (callable(value) or isinstance(value, torch.nn.Module))
    ]
    return ("it defines: " + ", ".join(names[:12])) if names else "it defines no class or function of its own"


def user_frames(err: BaseException) -> list[traceback.FrameSummary]:
    """The frames of `err`'s traceback that are the user's own code."""
    frames = traceback.extract_tb(err.__traceback__)
    return [f for f in frames if is_user_file(f.filename)]


@functools.lru_cache(maxsize=4096)  # asked for every frame of every recorded torch call
def is_user_file(filename: str) -> bool:
    """Whether `filename` is the user's code (not gradcli's, torch's or a frozen module)."""
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    return not str(Path(filename).resolve()).startswith(_NOT_USER)


@contextlib.contextmanager
def users_code(where: str) -> Iterator[None]:
    """Run the user's forward: what it raises becomes `user_error("{where} raised")` (their
    frames only); gradcli's own refusals pass through as they are."""
    try:
        yield
    except GradcliError:
        raise
    except (Exception, SystemExit) as err:  # sys.exit() in a forward is the user's code too
        raise user_error(f"{where} raised", err) from None


def user_error(what: str, err: BaseException) -> UserCodeError:
    """`what` (e.g. "forward raised"), then the user's frames and the exception, as Python
    prints a traceback but without gradcli's or torch's frames."""
    lines = [f"{what} {type(err).__name__}: {err}".rstrip()]
    missing = err.name if isinstance(err, ModuleNotFoundError) else None
    if isinstance(err, SyntaxError) and err.filename:
        # No frame of the user's ran: Python shows the file, the line and a caret under the spot.
        lines += "".join(traceback.format_exception_only(type(err), err)).rstrip("\n").splitlines()
        return UserCodeError("\n".join(lines))
    frames = user_frames(err)
    for frame in frames:
        lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}')
        code = frame.line or linecache.getline(frame.filename, frame.lineno or 0).strip()
        if code:
            lines.append(f"    {code}")
    if frames:
        lines.append(f"{type(err).__name__}: {err}".rstrip())
    error = UserCodeError("\n".join(lines))
    error.missing_module = missing
    return error


def import_code(where: str) -> Any:
    """The module a file path (`ops.py`) or a dotted name (`mypkg.ops`) names, imported as
    load_object imports the module of `where:NAME` (check-function's discovery walks it)."""
    return _import_file(Path(where)) if where.endswith(".py") else _import_module(where)
