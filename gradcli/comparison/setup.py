"""What the candidate is: the training setup `compare` puts beside the eager reference.

One `Setup` says how the candidate runs (torch.compile with a backend and mode, autocast in a
half precision, a GradScaler, weights cast to a half precision) and what the reference is
(eager float32, or float64). It is checked once, before any model runs: a bad option is a
usage error that names it, and `--backend inductor` on a machine without a C++ compiler is
refused with the reason (aot_eager needs none).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Literal

from ..errors import UsageError

Backend = Literal["inductor", "aot_eager", "eager"]
Half = Literal["bfloat16", "float16"]
BACKENDS: tuple[str, ...] = ("inductor", "aot_eager", "eager")
HALVES: tuple[str, ...] = ("bfloat16", "float16")
REFERENCES: tuple[str, ...] = ("float32", "float64")
MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: The compilers inductor's C++ code generation looks for (torch._inductor.cpp_builder), $CXX first.
COMPILERS = ("c++", "g++", "clang++")


@dataclass(frozen=True)
class Setup:
    """The candidate's options, and the reference's precision."""

    compile: bool = False
    backend: Backend = "inductor"
    mode: str | None = None
    amp: Half | None = None
    scaler: bool = False
    dtype: Half | None = None
    reference: Literal["float32", "float64"] = "float32"

    def __post_init__(self) -> None:
        _one_of("--backend", self.backend, BACKENDS)
        _one_of("--amp", self.amp, HALVES)
        _one_of("--dtype", self.dtype, HALVES)
        _one_of("--reference", self.reference, REFERENCES)
        _one_of("--mode", self.mode, MODES)
        if self.mode is not None and not self.compile:
            raise UsageError("--mode is torch.compile's mode: give --compile with it")
        if self.scaler and self.amp != "float16":
            raise UsageError("--scaler runs a GradScaler, which float16 autocast needs: give --amp float16 with it",
                             hint="bfloat16 has float32's range and needs no loss scaling")
        if self.amp and self.dtype:
            raise UsageError("give --amp or --dtype, not both",
                             hint="--amp keeps float32 weights under autocast; --dtype casts the weights themselves")

    @property
    def precision(self) -> str:
        """The precision the candidate computes its gradients in: the narrowest it uses."""
        return self.amp or self.dtype or "float32"

    def describe(self) -> str:
        """The candidate in a few words: `torch.compile(backend=aot_eager) + autocast(float16) + GradScaler`."""
        parts = []
        if self.compile:
            parts.append(f"torch.compile(backend={self.backend}" + (f", mode={self.mode})" if self.mode else ")"))
        if self.amp:
            parts.append(f"autocast({self.amp})" + (" + GradScaler" if self.scaler else ""))
        if self.dtype:
            parts.append(f"{self.dtype} weights")
        return " + ".join(parts) or "eager float32"

    def check_machine(self) -> None:
        """Refuse what this machine cannot run, before any model runs."""
        if self.compile and self.backend == "inductor" and cpp_compiler() is None:
            raise UsageError(
                "--backend inductor compiles C++ on the CPU, and this machine has no C++ compiler "
                f"(none of $CXX, {', '.join(COMPILERS)} is on PATH)",
                hint="install one (apt install g++), or compare with --backend aot_eager, which runs AOTAutograd without a compiler",
            )


def cpp_compiler() -> str | None:
    """The C++ compiler inductor would find, or None."""
    for name in (os.environ.get("CXX", ""), *COMPILERS):
        if name and (found := shutil.which(name)):
            return found
    return None


def _one_of(option: str, value: str | None, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        raise UsageError(f"{option} '{value}' is not one of: {', '.join(choices)}")
