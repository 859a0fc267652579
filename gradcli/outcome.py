"""The result protocol every command's result follows (pytest's TestReport in spirit).

A result is plain data with four parts, the same for trace, check, check-function, grads,
compare, memory and whatever comes next:

- `problems`: what went wrong, as `Problem` records (data, never sentences); how a kind of
  problem reads is declared beside the result that makes it, with `@sentence("kind")`, the way
  a renderer is a `_render_<Class>` method: `say(problem)` finds it;
- `ok`: `not problems`, and the command's exit status is `not ok`, nothing else;
- `notes`: what the reader should know that is not a problem;
- `as_dict()`: the `--json` document (docs/json.md), written by one JSON writer.

`Outcome` is the structural type (a command and the tests ask for it); `Reported` is the
mixin most results use so that `ok` cannot drift from `problems`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TypeVar, runtime_checkable

Says = TypeVar("Says", bound=Callable[["Problem"], str])


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


# -- how each kind of problem reads ------------------------------------------------------------
#: kind -> the sentence of a problem of that kind, as the text report and the JSON `problems`
#: show it. Filled by `@sentence` beside each result; tests/project/test_outcome.py finds every kind
#: the package makes and fails on one without its sentence.
SENTENCES: dict[str, Callable[[Problem], str]] = {}


def sentence(*kinds: str) -> Callable[[Says], Says]:
    """Declare the function below as how problems of `kinds` read (one sentence per kind)."""

    def register(says: Says) -> Says:
        for kind in kinds:
            if kind in SENTENCES:
                raise ValueError(f"the problem kind {kind!r} has a sentence already ({SENTENCES[kind].__qualname__})")
            SENTENCES[kind] = says
        return says

    return register


def say(problem: Problem) -> str:
    """The sentence of one `Problem` record."""
    says = SENTENCES.get(problem.kind)
    if says is None:
        raise ValueError(f"no sentence for a problem of kind {problem.kind!r}")
    return says(problem)


@sentence("backward-raised")
def _backward_raised(p: Problem) -> str:
    # grads and memory both run a model's backward; torch's own error is the problem.
    return f"backward raised: {p.detail['message']}"
