"""The expression library: named functions (activations and more) from `expressions/*.toml`.

Each entry is a function written in the expression language, with where it comes from:

    [swish]
    signature = "swish(x, beta=1.0)"
    body = "x * sigmoid(beta * x)"
    doc = "Self-gated activation x*sigmoid(beta*x)."
    source = "Ramachandran, Zoph & Le (2017), Searching for Activation Functions"
    link = "https://arxiv.org/abs/1710.05941"
    domain = [-8.0, 8.0]                      # default input range for checks
    derivative = "..."                        # optional: the published d/dx, in the language

Bodies are parsed with the same allow-list as user expressions and may only use their own
parameters, so a library file can never do more than an expression can. Entries call each
other (mish uses softplus); cycles are refused. A name that is also an operation (softplus)
documents that built-in: calls resolve to the operation, and the entry's body must call it.
"""

from __future__ import annotations

import ast
import keyword
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from .. import limits
from ..errors import GradcliError, LibraryError, LimitError, UnreadableError
from ..reading import read_file
from . import nodes as n
from .ops import OPS, Param
from .parser import parse

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ENV_VAR = "GRADCLI_LIBRARY"
_KEYS = {"signature", "body", "doc", "source", "link", "domain", "derivative", "kinks"}
_REQUIRED_KEYS = ("signature", "body", "doc", "source")


@dataclass(frozen=True)
class LibraryFunction:
    """One named function of the library."""

    name: str
    params: tuple[Param, ...]
    body: n.Program
    doc: str
    source: str
    link: str | None = None
    domain: tuple[float, float] = (-5.0, 5.0)
    kinks: tuple[float, ...] = ()
    derivative: n.Program | None = None
    path: Path | None = field(default=None, compare=False)
    body_text: str = ""
    derivative_text: str | None = None

    @property
    def builtin(self) -> bool:
        """Whether the name is also an operation (calls then go to the operation)."""
        return self.name in OPS

    def signature(self) -> str:
        parts = [p.name if p.required else f"{p.name}={p.default!r}" for p in self.params]
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True)
class Library:
    """All loaded functions, by name, and the folders they came from."""

    functions: dict[str, LibraryFunction]
    folders: tuple[Path, ...]

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def __getitem__(self, name: str) -> LibraryFunction:
        return self.functions[name]


def builtin_folder() -> Path:
    """expressions/ as shipped: inside the installed package, or at the top of a checkout."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "expressions", package.parent / "expressions"):
        if candidate.is_dir() and any(candidate.glob("*.toml")):
            return candidate
    return package / "expressions"


def library_folders(extra: Iterable[str | Path] = ()) -> tuple[Path, ...]:
    """The built-in folder, then $GRADCLI_LIBRARY (os.pathsep-separated), then `extra`."""
    folders = [builtin_folder()]
    env = os.environ.get(ENV_VAR, "")
    folders += [Path(p) for p in env.split(os.pathsep) if p]
    folders += [Path(p) for p in extra]
    return tuple(folders)


def default_library() -> Library:
    """The library for the current environment (built-in plus $GRADCLI_LIBRARY)."""
    return load_library(library_folders())


def load_library(folders: tuple[Path, ...]) -> Library:
    """Read every `*.toml` in `folders` (later folders may not redefine a name).

    Cached per folders and file versions, so an edited or added file is read again in a
    long-running process (tests, notebooks) while repeated calls stay free."""
    return _load_library(tuple(folders), _versions(folders))


def _versions(folders: Iterable[Path]) -> tuple[Any, ...]:
    stamps: list[Any] = []
    for folder in folders:
        try:
            paths = sorted(Path(folder).glob("*.toml"))
        except OSError:
            paths = []
        for path in paths:
            try:
                stat = path.stat()
                stamps.append((str(path), stat.st_mtime_ns, stat.st_size))
            except OSError:
                stamps.append((str(path), None))
    return tuple(stamps)


@lru_cache(maxsize=8)
def _load_library(folders: tuple[Path, ...], versions: tuple[Any, ...]) -> Library:
    raw: dict[str, tuple[Path, dict[str, Any]]] = {}
    for folder in folders:
        if not folder.is_dir():
            raise LibraryError(f"the library folder '{folder}' does not exist")
        for path in sorted(folder.glob("*.toml")):
            try:
                data = tomllib.loads(read_file(path, f"the library file {path}"))
            except tomllib.TOMLDecodeError as err:
                raise LibraryError(f"{path}: not valid TOML ({err})") from None
            except UnreadableError as err:
                what = "not valid TOML" if "UTF-8" in err.reason else "cannot be read"
                raise LibraryError(f"{path}: {what} ({err.reason})") from None
            except LimitError as err:
                raise LibraryError(f"{path}: {err.message}") from None
            for name, entry in data.items():
                if name in raw:
                    raise LibraryError(
                        f"{path}: '{name}' is already defined in {raw[name][0]}",
                        hint="give your function another name",
                    )
                if not isinstance(entry, dict):
                    raise LibraryError(f"{path}: '{name}' must be a table ([{name}])")
                if not _callable_name(name):
                    raise LibraryError(
                        f"{path}: '{name}' cannot be a function name",
                        hint="use a Python identifier that does not start with '_' and is not pi, e or a keyword",
                    )
                raw[name] = (path, entry)

    signatures = {name: _signature(name, path, entry) for name, (path, entry) in raw.items()}
    stubs = {name: _Stub(name, params) for name, params in signatures.items()}
    functions: dict[str, LibraryFunction] = {}
    for name, (path, entry) in raw.items():
        functions[name] = _function(name, path, entry, signatures[name], stubs)
    _refuse_cycles(functions)
    return Library(functions, folders)


@dataclass(frozen=True)
class _Stub:
    """A signature known before bodies are parsed, so entries can call each other."""

    name: str
    params: tuple[Param, ...]


def _signature(name: str, path: Path, entry: dict[str, Any]) -> tuple[Param, ...]:
    unknown = set(entry) - _KEYS
    if unknown:
        raise LibraryError(f"{path}: [{name}] has unknown keys: {', '.join(sorted(unknown))}")
    for key in _REQUIRED_KEYS:
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise LibraryError(f"{path}: [{name}] needs '{key}' (a string)")
    text = entry["signature"]
    where = f"{path}: [{name}] signature"
    try:
        call = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise LibraryError(f"{where} '{text}' is not of the form name(x, a=1.0)") from None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == name):
        raise LibraryError(f"{where} must be a call of '{name}', like {name}(x, a=1.0)")
    params: list[Param] = []
    for arg in call.args:
        if not isinstance(arg, ast.Name):
            raise LibraryError(f"{where}: positional parameters are plain names")
        params.append(Param(arg.id, "scalar"))
    for option in call.keywords:
        default = _number(option.value)
        if option.arg is None or default is None:
            raise LibraryError(f"{where}: a parameter with a default is name=number")
        if not abs(default) <= limits.MAX_CONSTANT:  # also refuses nan; big ints compare exactly
            raise LibraryError(f"{where}: the default of '{option.arg}' must be a finite number up to {limits.MAX_CONSTANT:g}")
        params.append(Param(option.arg, "scalar", default))
    names = [p.name for p in params]
    if not params or len(set(names)) != len(names):
        raise LibraryError(f"{where}: needs at least one parameter, each named once")
    if any(x.startswith("_") or x in n.CONSTANTS for x in names):
        raise LibraryError(f"{where}: parameter names may not start with '_' or be pi or e")
    return tuple(params)


def _callable_name(name: str) -> bool:
    """Whether `name(...)` can be written in an expression and means this entry."""
    return (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and not name.startswith("_")
        and name not in n.CONSTANTS
    )


def _finite_number(value: Any) -> bool:
    # TOML's true is a Python bool, which is an int: not a number here.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(node: ast.AST) -> float | int | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _number(node.operand)
        return None if value is None else -value
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def _function(
    name: str,
    path: Path,
    entry: dict[str, Any],
    params: tuple[Param, ...],
    stubs: dict[str, _Stub],
) -> LibraryFunction:
    names = tuple(p.name for p in params)
    programs: dict[str, n.Program | None] = {}
    for key in ("body", "derivative"):
        text = entry.get(key)
        if text is None:
            programs[key] = None
            continue
        if not isinstance(text, str):
            raise LibraryError(f"{path}: [{name}] '{key}' must be a string")
        try:
            programs[key] = parse(text, stubs, what=f"{path.name} [{name}] {key}", allowed_variables=names)
        except GradcliError as err:
            raise LibraryError(f"{path}: [{name}] {key} is invalid: {err.render()}") from None
    domain = entry.get("domain", [-5.0, 5.0])
    if not (
        isinstance(domain, list)
        and len(domain) == 2
        and all(_finite_number(v) and abs(v) <= limits.MAX_CONSTANT for v in domain)
        and domain[0] < domain[1]
    ):
        raise LibraryError(
            f"{path}: [{name}] domain must be [low, high]: numbers up to {limits.MAX_CONSTANT:g} "
            "in magnitude, low < high"
        )
    kinks = entry.get("kinks", [])
    if not (isinstance(kinks, list) and all(_finite_number(v) for v in kinks)):
        raise LibraryError(f"{path}: [{name}] kinks must be a list of finite numbers")
    link = entry.get("link")
    if link is not None and not isinstance(link, str):
        raise LibraryError(f"{path}: [{name}] link must be a string")
    if name in OPS and not _calls(programs["body"], name):
        raise LibraryError(
            f"{path}: [{name}] shares its name with the built-in operation, so its body must call it"
        )
    return LibraryFunction(
        name=name,
        params=params,
        body=programs["body"],  # type: ignore[arg-type]
        doc=entry["doc"].strip(),
        source=entry["source"].strip(),
        link=entry.get("link"),
        domain=(float(domain[0]), float(domain[1])),
        kinks=tuple(float(k) for k in kinks),
        derivative=programs["derivative"],
        path=path,
        body_text=entry["body"],
        derivative_text=entry.get("derivative"),
    )


def calls(program: n.Program) -> set[str]:
    """The names of every function a program calls."""
    roots = [s.value for s in program.statements] + [program.output]
    return {node.func for node in n.walk(*roots) if isinstance(node, n.Call)}


def _calls(program: n.Program | None, name: str) -> bool:
    return program is not None and name in calls(program)


def _refuse_cycles(functions: dict[str, LibraryFunction]) -> None:
    # Operations win over library names, so only calls to non-operation entries are edges.
    edges = {
        name: {c for c in calls(f.body) if c in functions and c not in OPS}
        for name, f in functions.items()
    }
    state: dict[str, int] = {}

    def visit(name: str, chain: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = " -> ".join(chain[chain.index(name):] + [name])
            raise LibraryError(f"the library functions call each other in a cycle: {cycle}")
        state[name] = 1
        for callee in sorted(edges[name]):
            visit(callee, chain + [name])
        state[name] = 2

    for name in sorted(functions):
        visit(name, [])
