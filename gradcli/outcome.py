"""The result protocol every command's result follows (pytest's TestReport in spirit).

A result is plain data with four parts, the same for trace, check, check-function, grads,
compare, memory and whatever comes next:

- `problems`: what went wrong, as `Problem` records (data, never sentences: words live beside
  the renderers);
- `ok`: `not problems`, and the command's exit status is `not ok`, nothing else;
- `notes`: what the reader should know that is not a problem;
- `as_dict()`: the `--json` document (docs/json.md), written by one JSON writer.

`Outcome` is the structural type (a command and the tests ask for it); `Reported` is the
mixin most results use so that `ok` cannot drift from `problems`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Problem:
    """One thing that makes a result not ok: its kind, what it is about, and the numbers."""

    kind: str  # a short machine name, e.g. "differs", "nonfinite-gradient", "backward-raised"
    subject: str = ""  # what it is about: a parameter, a node, a variable ("" for the whole run)
    detail: dict[str, Any] = field(default_factory=dict)  # the evidence, JSON-ready values

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, **self.detail}


@runtime_checkable
class Outcome(Protocol):
    """What every result offers: `ok`, `problems`, `notes` and its document."""

    @property
    def ok(self) -> bool: ...

    @property
    def problems(self) -> list[Problem]: ...

    @property
    def notes(self) -> list[str]: ...

    def as_dict(self) -> dict[str, Any]: ...


class Reported:
    """Mixin: `ok` is `not problems`; a subclass defines `problems` (and has `notes`)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def problems(self) -> list[Problem]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

