"""The demos: short tutorials that run real torch code and print it with what it produced.

Each demo is a module here with a one-line `SUMMARY` and `run(session, **options)`
(see `runner.Session`). The modules import torch only inside the code they run, so
listing the demos stays instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from types import ModuleType
from typing import Any, Callable

from ..errors import UsageError
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
class DemoRun:
    """What a demo produced: every block in order, its checks, the namespace its code ran in."""

    blocks: list[Block]
    verdicts: list[Verdict]
    namespace: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)


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
    return DemoRun(blocks, session.verdicts, session.namespace)
