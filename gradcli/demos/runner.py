"""Run a demo as a short tutorial: prose, code, and what the code produced.

A demo is a function `run(session, **options)` that calls `session.say(...)`,
`session.run(code)` and `session.show(obj)` in reading order. `run` executes the code in
one namespace shared by every step, like a notebook, so a reader who copies the steps top
to bottom into Python gets the same results. The code printed is the very string (or, for
`show`, the `inspect.getsource` of the very object) that runs: nothing is paraphrased.

Only the demos' own source strings (constants in this package) reach `exec`; nothing a user
types does: the demos take no code from the command line.

The session produces plain blocks (this module never imports rich); a renderer turns them
into text. Blocks go to `emit` as soon as each step has run, so a terminal shows the demo
as it progresses.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import os
import textwrap
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Union

#: How wide a result's str() is inside a demo: render/demo.py shows output at most 100 columns
#: wide, after a 4-space indent and a '#> ' prefix; a result wrapped wider is wrapped twice.
RESULT_WIDTH = 100 - 4 - 3


@dataclass(frozen=True)
class Heading:
    """A numbered step's title."""

    text: str


@dataclass(frozen=True)
class Prose:
    """A paragraph of explanation."""

    text: str


@dataclass(frozen=True)
class Code:
    """Code as it runs, and what it printed, warned, returned or raised (None: shown only)."""

    source: str
    output: str | None = None


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check the demo counts towards its exit status."""

    ok: bool
    text: str


@dataclass(frozen=True)
class GraphDrawing:
    """A walked autograd graph (gradcli.graph.walk.Graph) for the renderer to draw."""

    graph: Any
    title: str
    source: str = ""


@dataclass(frozen=True)
class Shell:
    """A gradcli command line for the reader to try (tests run each one)."""

    args: tuple[str, ...]

    @property
    def text(self) -> str:
        import shlex

        return "gradcli " + " ".join(shlex.quote(a) for a in self.args)


Block = Union[Heading, Prose, Code, Verdict, GraphDrawing, Shell]


@dataclass
class Session:
    """Runs a demo's steps in one namespace and emits what each produced."""

    emit: Callable[[Block], None]
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__demo__"})
    verdicts: list[Verdict] = field(default_factory=list)
    _steps: int = 0

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)

    def step(self, title: str) -> None:
        self._steps += 1
        self.emit(Heading(f"{self._steps}. {title}"))

    def say(self, text: str) -> None:
        self.emit(Prose(" ".join(textwrap.dedent(text).split())))

    def show(self, obj: Any) -> None:
        """Print an object's source (a class or function the demo then uses)."""
        self.emit(Code(textwrap.dedent(inspect.getsource(obj)).strip("\n")))

    def run(self, source: str, *, raises: type[BaseException] | tuple[type[BaseException], ...] = ()) -> Any:
        """Execute `source` in the shared namespace and emit it with its output.

        Like the Python prompt, a final expression's value is shown (unless None) and
        returned. An exception of a type in `raises` is the lesson: it is shown and
        returned; any other exception is a bug in the demo and propagates.
        """
        source = textwrap.dedent(source).strip("\n")
        body, last = _split_last_expression(source)
        printed = io.StringIO()
        value: Any = None
        raised: BaseException | None = None
        from ..widths import plain_width

        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(printed), \
                plain_width(RESULT_WIDTH):
            warnings.simplefilter("always")
            try:
                exec(compile(body, "<demo>", "exec"), self.namespace)
                if last is not None:
                    value = eval(compile(last, "<demo>", "eval"), self.namespace)
            except raises as err:  # type: ignore[misc]
                raised = value = err
        lines = [printed.getvalue().rstrip("\n")] if printed.getvalue() else []
        lines += [f"{w.category.__name__}: {_one_paragraph(str(w.message))}" for w in caught]
        if raised is not None:
            lines.append(f"{type(raised).__name__}: {_one_paragraph(str(raised))}")
            lines += _raised_in(raised)
        elif value is not None and last is not None:
            lines.append(repr(value))
        self.emit(Code(source, "\n".join(lines)))
        return value

    def draw(self, graph: Any, title: str, source: str = "") -> None:
        """Have the renderer draw a walked graph (plain data) the way `gradcli trace` does."""
        self.emit(GraphDrawing(graph, title, source))

    def shell(self, *args: str) -> None:
        """Suggest `gradcli ARGS...` (not run here: a pointer to the command that does this)."""
        self.emit(Shell(tuple(args)))

    def verdict(self, ok: bool, text: str) -> bool:
        verdict = Verdict(bool(ok), text)
        self.verdicts.append(verdict)
        self.emit(verdict)
        return verdict.ok


def source_path(module: str) -> str:
    """The file of gradcli.demos.<module>, relative to the working directory when inside it,
    for commands that take PATH.py:NAME."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{module}.py")
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _split_last_expression(source: str) -> tuple[str, str | None]:
    """The statements before a final expression, and that expression's source (or None)."""
    tree = ast.parse(source)
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return source, None
    last = tree.body[-1]
    lines = source.splitlines(keepends=True)
    head = "".join(lines[: last.lineno - 1])
    # The expression starts a line of its own in every demo; keep it exact.
    tail = "".join(lines[last.lineno - 1 : last.end_lineno])
    return head, textwrap.dedent(tail)


def _raised_in(err: BaseException) -> list[str]:
    """Where an error was raised, when that was in Python code outside torch and the demo.

    A TypeError inside a Function's backward is only useful with the line that raised it;
    torch's own errors and errors raised by the demo's code itself need no location.
    """
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return []
    frame = frames[-1]
    if frame.filename.startswith("<") or f"{os.sep}torch{os.sep}" in frame.filename:
        return []
    return [f"  raised in {frame.name}, {os.path.basename(frame.filename)} line {frame.lineno}:", f"    {frame.line}"]


def _one_paragraph(message: str) -> str:
    """An exception or warning text without torch's trailing blank lines."""
    return message.strip()
