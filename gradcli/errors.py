"""The errors gradcli reports to a user.

Every error a user can cause is a `GradcliError`; the CLI catches that one class, prints
`render()` (one paragraph, with the offending line and a caret when the error has a
position) and exits with status 2. Anything else escaping is a bug in gradcli.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A range of the input text, in characters: 1-based line, 0-based columns."""

    line: int
    col: int
    end_line: int
    end_col: int


class GradcliError(Exception):
    """Something about the user's input that gradcli refuses, with where and why."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        span: Span | None = None,
        hint: str | None = None,
        what: str = "expression",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.span = span
        self.hint = hint
        self.what = what

    def at(self, source: str, what: str = "expression") -> "GradcliError":
        """Attach the input text once it is known (errors raised deep inside lack it)."""
        if self.source is None:
            self.source = source
            self.what = what
        return self

    def render(self) -> str:
        """The user-facing paragraph: the message, the line with a caret, the hint."""
        parts = [f"error: {self.message}"]
        if self.source is not None and self.span is not None:
            parts.append(_excerpt(self.source, self.span, self.what))
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.render()


def split_lines(source: str) -> list[str]:
    """The lines of `source` as Python's parser numbers them: only \\n, \\r\\n and \\r end
    a line (str.splitlines also splits at form feeds and other separators, shifting carets)."""
    return _NEWLINE.split(source)


_NEWLINE = re.compile(r"\r\n|\r|\n")


def _excerpt(source: str, span: Span, what: str) -> str:
    lines = split_lines(source)
    index = min(max(span.line - 1, 0), len(lines) - 1)
    # One visible character per character (a tab, a null byte), so the caret stays aligned.
    text = "".join(c if c.isprintable() else " " for c in lines[index])
    start = min(span.col, len(text))
    # A span over several lines is underlined to the end of its first line.
    end = span.end_col if span.end_line == span.line else len(text)
    width = max(1, min(end, len(text)) - start)
    # Long lines (a 20,000-term sum) are cut to a window around the error.
    window = 100
    offset = 0
    if len(text) > window:
        offset = max(0, start - window // 2)
        text = text[offset : offset + window]
        width = min(width, window - (start - offset))
    where = f"{what}, line {span.line}, column {span.col + 1}"
    if len(lines) == 1:
        where = f"{what}, column {span.col + 1}"
    pointer = " " * (start - offset) + "^" + "~" * (width - 1)
    return f"  in {where}:\n    {text}\n    {pointer}"


class ParseError(GradcliError):
    """The text is not valid in gradcli's expression language."""


class UnknownNameError(GradcliError):
    """A function, method or keyword that gradcli does not know."""


class ArgumentError(GradcliError):
    """A call with the wrong number or kind of arguments."""


class ShapeError(GradcliError):
    """Tensor shapes (or dims) that do not fit an operation."""


class LimitError(GradcliError):
    """Input beyond a documented size limit, refused before any work is done."""


class VariableError(GradcliError):
    """A `--var NAME=SPEC` that cannot be understood."""


class LibraryError(GradcliError):
    """An expression-library file that is malformed."""


class DomainError(GradcliError):
    """No point left where the derivative is defined."""


class UsageError(GradcliError):
    """Options that do not fit together, or a command used the wrong way."""


class UnreadableError(UsageError):
    """A file or stream that cannot be read as text (`reason` says why)."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"cannot read {what}: {reason}")
        self.reason = reason


class UserCodeError(GradcliError):
    """The user's own code (a check-function file) could not be loaded or raised."""

    #: The arguments gradcli invented for the call that raised (no --var, no default).
    invented: tuple[str, ...] = ()
    #: The module an import of the user's code did not find (ModuleNotFoundError's name), if any.
    missing_module: str | None = None
