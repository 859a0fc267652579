"""The command-line interface (typer). `main` is the console script `gradcli`."""

from __future__ import annotations

from . import library  # noqa: F401  (each module registers its command on `app`)
from . import demo  # noqa: F401
from . import trace  # noqa: F401
from . import check  # noqa: F401
from . import plot  # noqa: F401
from .app import app


def main() -> None:
    app()
