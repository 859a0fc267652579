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

    # XXX: the recursion limit is process-wide; it is raised while any deep thread runs
    # (counted, so that one caller finishing cannot lower it under another still deep).
    _raise_limit()
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
        _restore_limit()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


_limit_lock = threading.Lock()
_limit_users = 0
_saved_limit = 0


def _raise_limit() -> None:
    global _limit_users, _saved_limit
    with _limit_lock:
        if _limit_users == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, _RECURSION))
        _limit_users += 1


def _restore_limit() -> None:
    global _limit_users
    with _limit_lock:
        _limit_users -= 1
        if _limit_users == 0:
            sys.setrecursionlimit(_saved_limit)
