"""The operations of one build, in the order torch applied them, with their results.

A recorded operation holds its tensors alive, so the ids that pair a result with its
`grad_fn` (and a graph node) stay meaningful while the chain rule is written out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Application:
    """One operation as the torch builder applied it: `name` as written ("*", "sigmoid")."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any


class Recorder:
    """The `applied` callback of `build.to_torch.build`: keeps every application."""

    def __init__(self) -> None:
        self.applications: list[Application] = []

    def __call__(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        self.applications.append(Application(name, args, dict(kwargs), result))


def build_recorded(prepared: Any) -> tuple[Any, list[Application]]:
    """Build a prepared program (as `pipeline.build_prepared`) and record its operations."""
    from .to_torch import build

    recorder = Recorder()
    built = build(prepared.program, prepared.leaves.tensors, library=prepared.library, applied=recorder)
    return built, recorder.applications
