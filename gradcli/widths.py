"""How wide plain text is: the CLI's on a pipe (without COLUMNS) and `str(result)` of the API.

A context variable rather than an argument, because `str()` takes none: a demo prints results
under a `#> ` prefix, narrower than a pipe, and narrows the width around the code it runs.
It sits below the renderers (render/plain.py reads it) and the demos (which set it).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

#: The width of the CLI's text on a pipe (without COLUMNS) and of `str(result)`.
PLAIN_WIDTH = 100
_WIDTH: contextvars.ContextVar[int] = contextvars.ContextVar("plain_width", default=PLAIN_WIDTH)


@contextlib.contextmanager
def plain_width(width: int) -> Iterator[None]:
    """`str(result)` laid out at `width` inside the block: a demo prints results under a
    `#> ` prefix, narrower than a pipe, and a result wrapped at 100 would be wrapped again."""
    token = _WIDTH.set(width)
    try:
        yield
    finally:
        _WIDTH.reset(token)


def width_now() -> int:
    """The width `str(result)` lays text out at here: PLAIN_WIDTH, or a `plain_width` block's."""
    return _WIDTH.get()
