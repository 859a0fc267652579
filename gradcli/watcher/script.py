"""Running the user's training script exactly as `python train.py ARGS` or `python -m pkg.mod
ARGS` would: its `__main__`, its folder first on sys.path, its own sys.argv. What it raises is
its own business: the caller turns it into the user's traceback without gradcli's frames.
Also its definitions alone (imports, classes, functions), for reading a bundle back."""

from __future__ import annotations

import ast
import runpy
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError


@dataclass(frozen=True)
class Script:
    path: str | None  # train.py
    module: str | None  # pkg.train (-m)
    args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.path if self.path is not None else f"-m {self.module}"


def check_script(script: Script, command: str = "watch") -> None:
    """Refuse what python itself would refuse before running anything (exit status 2)."""
    if script.path is not None:
        path = Path(script.path)
        if not path.is_file():
            raise UsageError(f"can't open file '{script.path}': no such file (gradcli {command} runs a training "
                             f"script: gradcli {command} train.py [ARGS...], or gradcli {command} -m package.module)")
    else:
        import importlib.util

        try:
            spec = importlib.util.find_spec(script.module or "")
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise UsageError(f"no module named '{script.module}' (gradcli {command} -m takes a module python -m could run)")


def run_script(script: Script) -> None:
    """Run it in this process; restores sys.argv and sys.path afterwards."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if script.path is not None:
            sys.argv = [script.path, *script.args]
            sys.path.insert(0, str(Path(script.path).resolve().parent))
            runpy.run_path(script.path, run_name="__main__")
        else:
            sys.argv = [script.module or "", *script.args]
            sys.path.insert(0, str(Path.cwd()))
            runpy.run_module(script.module or "", run_name="__main__", alter_sys=True)
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path


#: Top-level statements a script's definitions are made of: run to read a bundle back.
_DEFINING = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def definitions(script: Script) -> dict[str, Any]:
    """The script's imports, classes, functions and constant assignments (`EPS = 1e-8`), run in a
    module of their own, without any other top-level statement: a script whose training loop
    sits at top level (no `if __name__ == "__main__":`) does not train again when a bundle
    of it is read (bundle.py). The names it defines, by name."""
    import importlib.util

    if script.path is not None:
        path, package = Path(script.path), None
    else:
        spec = importlib.util.find_spec(script.module or "")
        if spec is None or not spec.origin:
            raise UsageError(f"no module named '{script.module}': the bundle's script cannot be found")
        path, package = Path(spec.origin), spec.parent
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError) as err:
        raise UsageError(f"the bundle's script {path} cannot be read: {err}") from None
    tree.body = [node for node in tree.body if _defines(node)]
    module = types.ModuleType("__gradcli_bundle__")
    module.__file__, module.__package__ = str(path), package
    saved_path = sys.path[:]
    sys.modules[module.__name__] = module  # (dataclasses and typing look their class's module up)
    try:
        sys.path.insert(0, str(path.resolve().parent))
        exec(compile(tree, str(path), "exec"), module.__dict__)  # noqa: S102 - the user's own definitions
    finally:
        sys.path[:] = saved_path
        sys.modules.pop(module.__name__, None)
    return module.__dict__


def _defines(node: ast.stmt) -> bool:
    """An import, a class, a function, a constant, or a `try:` of those (an optional import)."""
    if isinstance(node, _DEFINING):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        try:
            ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return True
    if isinstance(node, ast.Try):
        parts = [*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)]
        return all(isinstance(s, ast.Pass) or _defines(s) for s in parts)
    return False
