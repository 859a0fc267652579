"""The demos: short tutorials that run real torch code and print it with what it produced.

Each demo is a module here with a one-line `SUMMARY` and `run(session, **options)`
(see `runner.Session`). The modules import torch only inside the code they run, so
listing the demos stays instant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from types import ModuleType
from typing import Any, Callable

from ..errors import UsageError
from ..outcome import Problem, Reported, sentence
from ..words import problem_sentences
from .runner import Block, Session, Verdict

NAMES = ("swish", "graph", "backward", "grad", "chain-rule")


def load(name: str) -> ModuleType:
    """The demo module called `name`; a UsageError listing the demos for any other name."""
    if name not in NAMES:
        raise UsageError(
            f"there is no demo named {name!r}. The demos are:\n{listing()}",
            hint="run `gradcli demo NAME`, e.g. `gradcli demo swish`",
        )
    return import_module(f"{__name__}.{name.replace('-', '_')}")  # chain-rule is chain_rule.py


def listing() -> str:
    """One line per demo: its name and what it shows."""
    width = max(map(len, NAMES))
    return "\n".join(f"  {name:<{width}}  {load(name).SUMMARY}" for name in NAMES)


@dataclass
class DemoRun(Reported):
    """What a demo produced: every block in order, its checks, the namespace its code ran in
    (outcome.py's protocol: a check that failed is a problem)."""

    blocks: list[Block]
    verdicts: list[Verdict]
    namespace: dict[str, Any]
    name: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[Problem]:
        return [Problem("demo-check-failed", self.name, {"check": v.text}) for v in self.verdicts if not v.ok]

    def as_dict(self) -> dict[str, Any]:
        """`gradcli demo NAME --json` (docs/json.md): the checks, not the blocks shown."""
        return {"demo": self.name, "ok": self.ok, "checks": [{"ok": v.ok, "text": v.text} for v in self.verdicts],
                "problems": problem_sentences(self.problems), "notes": self.notes}


def run_demo(name: str, emit: Callable[[Block], None] | None = None, **options: Any) -> DemoRun:
    """Run demo `name`, passing each block to `emit` as it is produced (and keeping them all)."""
    module = load(name)
    blocks: list[Block] = []

    def keep(block: Block) -> None:
        blocks.append(block)
        if emit is not None:
            emit(block)

    session = Session(keep)
    module.run(session, **options)
    return DemoRun(blocks, session.verdicts, session.namespace, name)


@sentence("demo-check-failed")
def _demo_check_failed(p: Problem) -> str:
    return f"{p.subject}: {p.detail['check']}"
