"""What one run of the script is: the setup text of `--a`/`--b`, parsed and checked before any
process starts.

    same                       the script as written (again: is it reproducible?)
    float64                    the model and its floating inputs cast to float64 at its first call
    compile[:BACKEND]          the model's forward compiled (inductor, aot_eager, eager)
    autocast:bfloat16|float16  the model's forward under CPU autocast (float16 with a loss scale)
    deterministic              torch.use_deterministic_algorithms(True) for the whole run
    ranks:N                    torchrun with N processes (the script's own torch.distributed, e.g. DDP on gloo)
    python:PATH                the script as written, under another interpreter (a venv with another torch)

A setup is data (`RunSetup`); the child process (child.py) applies it to the script's first
model call, and the band (band.py) reads its precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..comparison.setup import BACKENDS, COMPILERS, HALVES, cpp_compiler
from ..errors import UsageError

Kind = Literal["same", "float64", "compile", "autocast", "deterministic", "ranks", "python"]
KINDS: tuple[str, ...] = ("same", "float64", "compile[:BACKEND]", "autocast:bfloat16|float16", "deterministic", "ranks:N",
                          "python:PATH")
#: The most ranks a run on one machine is given.
MAX_RANKS = 16


@dataclass(frozen=True)
class RunSetup:
    """One run's setup: its kind and, for compile and autocast, its argument."""

    kind: Kind = "same"
    backend: str = "inductor"  # compile's
    half: str | None = None  # autocast's dtype
    ranks: int = 1  # ranks: torchrun's processes
    python: str | None = None  # python's: the interpreter

    @property
    def text(self) -> str:
        """As given on the command line: `compile:aot_eager`, `autocast:bfloat16`, `same`."""
        if self.kind == "compile":
            return f"compile:{self.backend}"
        if self.kind == "autocast":
            return f"autocast:{self.half}"
        if self.kind == "ranks":
            return f"ranks:{self.ranks}"
        if self.kind == "python":
            return f"python:{self.python}"
        return self.kind

    @property
    def precision(self) -> str:
        """The narrowest precision the run computes in."""
        if self.kind == "float64":
            return "float64"
        return self.half if self.kind == "autocast" and self.half else "float32"

    def describe(self) -> str:
        return {
            "same": "the script as written",
            "float64": "the model in float64",
            "compile": f"torch.compile(backend={self.backend})",
            "autocast": f"autocast({self.half})" + (" + loss scaling" if self.half == "float16" else ""),
            "deterministic": "torch.use_deterministic_algorithms(True)",
            "ranks": f"torchrun with {self.ranks} processes",
            "python": f"the script as written, under {self.python}",
        }[self.kind]

    def as_dict(self) -> dict[str, object]:
        return {"setup": self.text, "describe": self.describe(), "precision": self.precision}

    def check_machine(self, option: str) -> None:
        """Refuse what this machine cannot run, before any process starts."""
        if self.kind == "compile" and self.backend == "inductor" and cpp_compiler() is None:
            raise UsageError(
                f"{option} compile:inductor compiles C++ on the CPU, and this machine has no C++ compiler "
                f"(none of $CXX, {', '.join(COMPILERS)} is on PATH)",
                hint=f"install one (apt install g++), or give {option} compile:aot_eager, which needs none",
            )


def parse_setup(text: str, option: str = "--b") -> RunSetup:
    """`compile:aot_eager` -> RunSetup("compile", backend="aot_eager"); anything else is refused by name."""
    kind, _, arg = text.strip().partition(":")
    if kind in ("same", "float64", "deterministic"):
        if arg:
            raise UsageError(f"{option} {text!r}: {kind} takes no argument", hint=f"give {option} {kind}")
        return RunSetup(kind)  # type: ignore[arg-type]
    if kind == "compile":
        backend = arg or "inductor"
        if backend not in BACKENDS:
            raise UsageError(f"{option} {text!r}: the backend '{backend}' is not one of: {', '.join(BACKENDS)}")
        return RunSetup("compile", backend=backend)
    if kind == "autocast":
        if arg not in HALVES:
            raise UsageError(f"{option} {text!r}: autocast takes a dtype, one of: {', '.join(HALVES)}",
                             hint=f"give {option} autocast:bfloat16")
        return RunSetup("autocast", half=arg)
    if kind == "ranks":
        if not arg.isdigit() or not 2 <= int(arg) <= MAX_RANKS:
            raise UsageError(f"{option} {text!r}: ranks takes the number of processes, 2 to {MAX_RANKS}",
                             hint=f"give {option} ranks:2")
        return RunSetup("ranks", ranks=int(arg))
    if kind == "python":
        import os
        import shutil

        found = shutil.which(arg) if arg else None
        if found is None or not os.access(found, os.X_OK):
            raise UsageError(f"{option} {text!r}: no interpreter '{arg}' to run", hint=f"give {option} python:/path/to/venv/bin/python")
        return RunSetup("python", python=found)
    raise UsageError(f"{option} {text!r} is not a setup; the setups are: {', '.join(KINDS)}")
