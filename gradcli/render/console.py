"""The rich consoles every renderer writes to.

Colour only on a terminal and never with NO_COLOR set; on a pipe or file the text is plain
and stable (a fixed width unless COLUMNS says otherwise), so output can be diffed and grepped.
"""

from __future__ import annotations

import os
import sys
from typing import Any

PLAIN_WIDTH = 100


def make_console(*, stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    terminal = stream.isatty()
    columns = os.environ.get("COLUMNS", "")
    # COLUMNS=wide (or empty) is the environment's mistake, not the user's: keep the default.
    width = None if terminal else (int(columns) if columns.isdigit() and int(columns) > 0 else PLAIN_WIDTH)
    return Console(
        file=stream,
        no_color=bool(os.environ.get("NO_COLOR")) or not terminal,
        highlight=False,
        width=width,
        soft_wrap=False,
        emoji=False,
    )


def print_json(document: Any) -> None:
    """One JSON document on stdout (nothing else), NaN/inf written as strings."""
    import json

    from .json import finite_safe

    sys.stdout.write(json.dumps(finite_safe(document), indent=2, allow_nan=False, default=str) + "\n")
