"""Run torchviz's `make_dot` the way a careful user must on a deep graph: it recurses once per
node, so the recursion limit is raised and the work runs in a thread with a big stack (or
CPython's C stack may overflow). Shared by torchviz_chain.py and torchviz_model.py."""

from __future__ import annotations

import sys
import threading
from typing import Callable


def run_deep(work: Callable[[], None], recursion_limit: int, name: str) -> None:
    """work() in a 512 MB-stack thread; a failure there is exit status 1 with its repr."""
    sys.setrecursionlimit(recursion_limit)
    threading.stack_size(512 * 1024 * 1024)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # reported below, so that a failure is exit status 1
            failed.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if failed:
        raise SystemExit(f"{name} failed: {failed[0]!r}")
