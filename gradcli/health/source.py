"""Where in the user's code an operation ran: the innermost frame outside torch and gradcli.

Model code calls torch (nn.Linear.forward, F.linear, ...) which gradcli observes from inside
torch's dispatch, so the frame that matters is the nearest one that belongs to neither. It
is looked up only when something worth naming happened (a cut of the graph, a dead
activation, a non-finite value), never for every operation.
"""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

import torch

import gradcli

_TORCH, _GRADCLI = (os.path.dirname(os.path.abspath(p.__file__)) + os.sep for p in (torch, gradcli))


@dataclass(frozen=True, slots=True)
class Source:
    """A line of the user's code: file as given by Python, 1-based line, its text."""

    file: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}  {self.code}"


def user_source(depth: int = 0) -> Source | None:
    """The innermost frame of the user's code above the caller of this function's caller
    (plus `depth` more frames), walking out through torch; None when gradcli comes first (an
    operation gradcli itself ran, such as a --loss expression in its language)."""
    frame = sys._getframe(depth + 2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_GRADCLI):
            return None
        if not filename.startswith(_TORCH) and not filename.startswith("<frozen"):
            code = linecache.getline(filename, frame.f_lineno).strip()
            return Source(filename, frame.f_lineno, code)
        frame = frame.f_back
    return None
