"""Where output is printed: the only place in gradcli that writes a result to stdout.

Commands hand a result and a format name to `show`; the format's renderer (gradcli.render)
returns text or `Line`s, and this module writes them. Colour only on a terminal and never
with NO_COLOR set; on a pipe or file the text is plain and stable (a fixed width unless
COLUMNS says otherwise), so output can be diffed and grepped.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator

from ..render.plain import PLAIN_WIDTH
from .app import EXIT_OK, EXIT_PROBLEM


def make_console(*, stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    terminal = stream.isatty()
    columns = os.environ.get("COLUMNS", "")
    # COLUMNS=wide (or empty) is the environment's mistake, not the user's: keep the default.
    width = None if terminal else (int(columns) if columns.isdigit() and int(columns) > 0 else PLAIN_WIDTH)
    console = Console(
        file=stream,
        no_color=bool(os.environ.get("NO_COLOR")) or not terminal,
        highlight=False,
        width=width,
        soft_wrap=False,
        emoji=False,
    )
    # rich's own answer to a closed pipe is SystemExit(1), which here would mean a wrong gradient.
    console.on_broken_pipe = _reader_left
    return console


def render_for(result: Any, fmt: str = "text", console: Any = None, **options: Any) -> Any:
    """`result` rendered in `fmt` for `console` (its width and whether it shows colour)."""
    from ..render.formats import render

    if fmt != "text":
        return render(result, fmt, **options)
    console = console or make_console()
    return render(result, fmt, width=console.width, color=console.is_terminal and not console.no_color, **options)


def write(output: Any, console: Any = None) -> None:
    """Print a renderer's output: text as it is, `Line`s on the console."""
    try:
        _write(output, console)
    except BrokenPipeError:
        _reader_left()


def _write(output: Any, console: Any) -> None:
    if isinstance(output, str):
        (console.file if console is not None else sys.stdout).write(output)
        return
    console = console or make_console()
    for line in output:
        console.print(
            line.item, style=line.style, soft_wrap=line.soft_wrap or _fits(line.item, console.width), markup=False,
            **({"overflow": "crop", "no_wrap": True} if line.crop else {}),
        )


def _reader_left() -> None:
    """`gradcli ... | head` or `| grep -q`: the reader closed the pipe. What is left to print
    goes nowhere, and the command still ends with its own exit status (rich and click would
    exit 1, which here means a wrong gradient) for a CI line under `set -o pipefail`."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _fits(item: Any, width: int) -> bool:
    """Whether `item` is one line of text, shorter than `width`, that rich would print as it
    is: then it is printed as soft wrap, the same text without rich's word wrapping (most of
    a line's cost: a model's 2,275-line trace spent 0.18 s printing, 0.08 s this way). Rich
    neither divides, pads, justifies nor crops such a line either way (tests/render/test_output.py)."""
    from rich.cells import cell_len
    from rich.text import Text

    if isinstance(item, Text):
        if item.justify not in (None, "default") or item.end != "\n":
            return False
        item = item.plain
    elif not isinstance(item, str):
        return False  # tables, panels: laid out by rich
    return "\n" not in item and "\t" not in item and cell_len(item) <= width


def show(result: Any, fmt: str = "text", console: Any = None, **options: Any) -> None:
    """Render `result` in `fmt` and print it."""
    console = console or (make_console() if fmt == "text" else None)
    write(render_for(result, fmt, console, **options), console)


def exit_status(ok: bool) -> int:
    return EXIT_OK if ok else EXIT_PROBLEM


def say(text: str, console: Any = None) -> None:
    """One line of the command's own (not a result's), e.g. where a file was written."""
    from ..render.contract import Line

    write([Line(text)], console)


@contextlib.contextmanager
def user_prints_aside(machine_output: bool) -> Iterator[None]:
    """While your code runs, what it prints goes to stderr when stdout carries a document.

    A model or Function that prints in forward (a shape, a debug line) would otherwise land in
    the middle of `--json` (or `--dot -`), which then no longer parses; on a text report the
    prints stay on stdout, where `python model.py` puts them.
    """
    if not machine_output:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield
