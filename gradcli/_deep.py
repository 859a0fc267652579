"""Run recursive work on a large stack.

Python's `ast` and gradcli's interpreters recurse once per level of the expression tree, and a
20,000-term sum is 20,000 levels deep. Rather than rewrite every visitor as a loop, such work
runs in a thread with a large stack and a matching recursion limit; `limits.MAX_DEPTH`
bounds the depth, so the recursion is always bounded.

Under an address-space cap (`ulimit -v`, as on HPC login nodes) the 512 MB of virtual stack
may not be had once torch has taken its ~3.1 GB: the thread then gets the largest of the
smaller stacks that can be had. Measured: `check` of a 24,000-deep sum runs in a 2 MB stack
(and crashes in 1 MB), so 32 MB keeps the whole MAX_DEPTH; a smaller stack lowers the
recursion limit with it, and an expression too deep for it is a LimitError that says why.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, TypeVar

from . import limits
from .errors import LimitError

T = TypeVar("T")

_STACK_BYTES = 512 * 1024 * 1024  # virtual; only the pages a deep expression touches are used
#: Smaller stacks, tried in order when the large one cannot be had; from _FULL_DEPTH_BYTES up
#: the recursion limit stays whole (16x the 2 MB measured to suffice), below it shrinks.
_SMALLER_STACKS = (128 * 1024 * 1024, 32 * 1024 * 1024, 8 * 1024 * 1024)
_FULL_DEPTH_BYTES = 32 * 1024 * 1024
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
        _local.stack = stack
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the caller's thread below
            outcome["error"] = exc

    # XXX: the recursion limit is process-wide; it is raised while any deep thread runs
    # (counted, so that one caller finishing cannot lower it under another still deep).
    go = threading.Event()
    stack = 0
    with _lock:
        thread, stack = _started(target, go)
    _raise_limit(_recursion_for(stack))
    try:
        go.set()
        while thread.is_alive():
            thread.join(0.1)  # a short timeout keeps Ctrl-C working in the main thread
    finally:
        _restore_limit()
    error = outcome.get("error")
    if isinstance(error, RecursionError) and stack < _FULL_DEPTH_BYTES:
        raise too_deep_for_stack() from None
    if error is not None:
        raise error
    return outcome["value"]


def reduced_stack() -> int | None:
    """The stack of this deep thread when a cap made it smaller than deep inputs need, else None."""
    stack = getattr(_local, "stack", None)
    return stack if stack is not None and stack < _FULL_DEPTH_BYTES else None


def too_deep_for_stack() -> LimitError:
    """The error for an input nested deeper than the reduced stack holds."""
    stack = reduced_stack() or _SMALLER_STACKS[-1]
    return LimitError(
        f"the input is nested deeper than a {stack // 2**20} MB stack holds: the address space this "
        f"process may use ({_cap_text()}) leaves no room for the {_STACK_BYTES // 2**20} MB stack "
        f"deep inputs get",
        hint="raise the limit (ulimit -v), or give a less deeply nested input",
    )


def _started(target: Callable[[], None], go: threading.Event) -> tuple[threading.Thread, int]:
    """A started deep thread (waiting on `go` until the recursion limit is raised) and its stack."""

    def waiting() -> None:
        go.wait()
        target()

    old_size = threading.stack_size()
    try:
        for stack in (_STACK_BYTES, *_SMALLER_STACKS):
            threading.stack_size(stack)
            thread = threading.Thread(target=waiting, name="gradcli-deep", daemon=True)
            try:
                thread.start()
                return thread, stack
            except RuntimeError:  # "can't start new thread": no room for this stack
                continue
    finally:
        threading.stack_size(old_size)
    raise LimitError(
        f"no thread with even a {_SMALLER_STACKS[-1] // 2**20} MB stack can be started: the address space "
        f"this process may use ({_cap_text()}) is taken",
        hint="raise the limit (ulimit -v); torch alone needs about 3.2 GB of it",
    )


def _recursion_for(stack: int) -> int:
    if stack >= _FULL_DEPTH_BYTES:
        return _RECURSION
    return max(sys.getrecursionlimit(), _RECURSION * stack // _FULL_DEPTH_BYTES)


def _cap_text() -> str:
    from .limits import address_space_limit

    cap = address_space_limit()
    return "no limit set" if cap is None else f"ulimit -v {cap // 1024} KB, {cap / 2**30:.1f} GiB"


_limit_lock = threading.Lock()
_limit_users = 0
_saved_limit = 0


def _raise_limit(recursion: int) -> None:
    global _limit_users, _saved_limit
    with _limit_lock:
        if _limit_users == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, recursion))
        _limit_users += 1


def _restore_limit() -> None:
    global _limit_users
    with _limit_lock:
        _limit_users -= 1
        if _limit_users == 0:
            sys.setrecursionlimit(_saved_limit)
