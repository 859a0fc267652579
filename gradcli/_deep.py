"""Run recursive work on a large stack.

Python's `ast` and gradcli's interpreters recurse once per level of the expression tree, and a
20,000-term sum is 20,000 levels deep. Rather than rewrite every visitor as a loop, such work
runs in a thread with a large stack and a matching recursion limit; `limits.MAX_DEPTH`
bounds the depth, so the recursion is always bounded.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, TypeVar

from . import limits

T = TypeVar("T")

_STACK_BYTES = 512 * 1024 * 1024  # virtual; only the pages a deep expression touches are used
_RECURSION = limits.MAX_DEPTH * 6 + 10_000
_local = threading.local()
_lock = threading.Lock()


def run_deep(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call fn(*args, **kwargs) where deep recursion is safe; re-raise what it raises."""
    if getattr(_local, "deep", False):
        return fn(*args, **kwargs)
    outcome: dict[str, Any] = {}

    def target() -> None:
        _local.deep = True
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the caller's thread below
            outcome["error"] = exc

    old_limit = sys.getrecursionlimit()
    # XXX: the recursion limit is process-wide; it is raised only while the thread runs.
    sys.setrecursionlimit(max(old_limit, _RECURSION))
    try:
        with _lock:
            old_size = threading.stack_size()
            threading.stack_size(_STACK_BYTES)
            try:
                thread = threading.Thread(target=target, name="gradcli-deep", daemon=True)
                thread.start()
            finally:
                threading.stack_size(old_size)
        while thread.is_alive():
            thread.join(0.1)  # a short timeout keeps Ctrl-C working in the main thread
    finally:
        sys.setrecursionlimit(old_limit)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
