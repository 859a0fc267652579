"""One `gradcli check` of one expression: what every step of it reads, passed as one.

The elementwise and exact modes, their gradchecks and the settling of a failed gradcheck each
took the same result, program, plan, library, variable names and device, seven arguments in
the same order through six functions. They take a `CheckContext` now; `result` in it is the
record the steps fill in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ...exact.plan import Plan
from ...interpret.variables import resolve_dtype
from ...language.library import Library
from .result import CheckResult


@dataclass(frozen=True)
class CheckContext:
    result: CheckResult
    program: Any  # the parsed, prepared expression (language/)
    plan: Plan
    library: Library
    device: str = "cpu"

    @property
    def names(self) -> list[str]:
        """The variables the output uses, in the program's order."""
        return list(self.program.variables)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype autograd is checked at (`--dtype`)."""
        return resolve_dtype(self.result.dtype)

    def torch_fn(self) -> Callable[..., Any]:
        """The expression as a torch function of its variables, in `names` order (for gradcheck)."""
        from ...interpret.to_torch import build

        names, program, library = self.names, self.program, self.library

        def fn(*xs: torch.Tensor) -> Any:
            return build(program, dict(zip(names, xs)), library=library).output

        return fn
