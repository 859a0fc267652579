"""The command-line interface (typer). `main` is the console script `gradcli`."""

from __future__ import annotations

import os
import sys

# Each module registers its command on `app`; the import order is the order of `--help`.
from . import trace  # noqa: F401, I001
from . import check  # noqa: F401
from . import demo  # noqa: F401
from . import plot  # noqa: F401
from . import library  # noqa: F401
from .app import app


def main() -> None:
    """Run the app, then leave without the interpreter's teardown.

    Tearing down torch and a large autograd graph costs ~0.8-1.2 s after all output is
    written (measured: `import torch` alone spends 0.8 s in teardown here). A command's work
    is done once its output is flushed, so the process exits at once with its status.
    """
    try:
        app()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if isinstance(done.code, str):
            sys.stderr.write(done.code + "\n")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # `gradcli ... | head`: the reader left; nothing more to say
        pass
    os._exit(code)
