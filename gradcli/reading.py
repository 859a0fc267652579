"""Reading the user's text (@FILE, stdin, library files) with a cap on its size.

The size limits on expressions are checked on the text, so the text must not be read whole
first: `@/dev/zero` would never end and a 10 GB file would be read into memory before being
refused. Reads stop one byte past MAX_FILE_BYTES, and a path that is a device (or a symlink
to one) is refused before it is opened; pipes (`@<(cmd)`) are read with the same cap.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import BinaryIO, TextIO

from .errors import LimitError, UnreadableError
from .limits import MAX_FILE_BYTES


def read_capped(stream: BinaryIO | TextIO, what: str) -> str:
    """The text of `stream` (bytes as UTF-8, or text: a replaced sys.stdin has no bytes),
    refusing more than MAX_FILE_BYTES bytes (or characters)."""
    data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        unit = "characters" if isinstance(data, str) else "bytes"
        raise LimitError(f"{what} is larger than {MAX_FILE_BYTES:,} {unit}")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UnreadableError(what, f"it is not UTF-8 text ({err.reason} at byte {err.start})") from None


def read_file(path: Path, what: str, *, pipes: bool = False) -> str:
    """The text of the file at `path`: a regular file (or, with `pipes`, a FIFO)."""
    try:
        mode = path.stat().st_mode  # follows symlinks: a link to /dev/zero is a device
        if not (stat.S_ISREG(mode) or (pipes and stat.S_ISFIFO(mode))):
            raise UnreadableError(what, "it is not a regular file")
        with path.open("rb") as stream:
            return read_capped(stream, what)
    except OSError as err:
        raise UnreadableError(what, str(err.strerror or err)) from None
