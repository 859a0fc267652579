"""Running the user's training script exactly as `python train.py ARGS` or `python -m pkg.mod
ARGS` would: its `__main__`, its folder first on sys.path, its own sys.argv. What it raises is
its own business: the caller turns it into the user's traceback without gradcli's frames."""

from __future__ import annotations

import runpy
import sys
from dataclasses import dataclass
from pathlib import Path

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
