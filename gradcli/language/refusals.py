"""What the parser says about input it refuses: Python's own syntax errors, and the Python
constructs the language does not have, each with a hint at what would be right.

The parser decides what is refused; this module only words it, so the messages a user reads
are all in one place and the parser reads as the allow-list it is.
"""

from __future__ import annotations

import ast
import difflib
import warnings
from typing import Any

from ..errors import LimitError, ParseError, Span

#: Python constructs the language does not have: (message, hint).
_REFUSED: dict[type, tuple[str, str | None]] = {
    ast.Subscript: ("subscripts (x[0]) are not part of the language", "reduce with sum/mean, or pass the element with --var"),
    ast.Attribute: ("attribute access is not part of the language", "only method calls on the operations whitelist are allowed, e.g. x.pow(2).sum()"),
    ast.Lambda: ("lambdas are not part of the language", None),
    ast.ListComp: ("comprehensions are not part of the language", None),
    ast.SetComp: ("comprehensions are not part of the language", None),
    ast.DictComp: ("comprehensions are not part of the language", None),
    ast.GeneratorExp: ("generator expressions are not part of the language", None),
    ast.BoolOp: ("'and'/'or' are not part of the language", "combine conditions with nested where(...)"),
    ast.IfExp: ("conditional expressions (a if c else b) are not part of the language", "use where(c, a, b)"),
    ast.Dict: ("dicts are not part of the language", None),
    ast.Set: ("sets are not part of the language", None),
    ast.JoinedStr: ("strings are not part of the language", None),
    ast.Starred: ("star-arguments are not part of the language", None),
    ast.NamedExpr: ("':=' is not part of the language", "use a statement: h = ...; ..."),
    ast.Await: ("'await' is not part of the language", None),
    ast.Yield: ("'yield' is not part of the language", None),
    ast.YieldFrom: ("'yield' is not part of the language", None),
    ast.Slice: ("slices are not part of the language", None),
    ast.Tuple: ("tuples are only allowed as a dim argument (dim=(0, 1))", "give tensor values with --var x=[1, 2, 3]"),
    ast.List: ("lists are only allowed as a dim argument (dim=[0, 1])", "give tensor values with --var x=[1, 2, 3]"),
}
#: Module names PyTorch users write before a function (torch.exp); the language has none.
MODULE_PREFIXES = ("torch", "math", "np", "numpy")
#: Hints for binary operators Python has and the language does not.
BINOP_HINTS: dict[type, str | None] = {
    ast.BitXor: "use ** for powers (x**2), not ^",
    ast.FloorDiv: "use / for division",
    ast.Mod: None,
}
_OPERATOR_TEXT = {
    "BitXor": "^", "BitAnd": "&", "BitOr": "|", "FloorDiv": "//", "Mod": "%", "LShift": "<<",
    "RShift": ">>", "Not": "not", "Invert": "~", "Eq": "==", "NotEq": "!=", "Is": "is",
    "IsNot": "is not", "In": "in", "NotIn": "not in",
}


def refusal(node: ast.AST) -> tuple[str, str | None]:
    """(message, hint) for a Python expression node the language does not have."""
    return _REFUSED.get(type(node), (f"'{type(node).__name__}' is not part of the language", None))


def op_text(op: ast.AST) -> str:
    """How the user wrote an operator node: `^` for ast.BitXor."""
    return _OPERATOR_TEXT.get(type(op).__name__, type(op).__name__)


def did_you_mean(name: str, candidates: Any) -> str | None:
    """"did you mean 'sigmoid'?" for the closest candidate, if one is close enough."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


#: What ends a line for Python's tokenizer or str.splitlines besides "\n": a source holding one
#: is parsed whole, so that its line numbers are Python's.
_OTHER_LINE_ENDS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def python_statements(source: str) -> list[tuple[int, ast.stmt]]:
    """Python's parse of `source`: its statements, each with the number of lines before its own
    (a statement's nodes number their lines from 1 within it, plus that).

    A long program is generated, and repeats its lines: the 20,000-operation chain is
    `h = sin(h)` 19,998 times, and Python's parse of its whole text was half the time `trace`
    spent on it (0.34 s). When every line is a whole statement by itself, each distinct line is
    parsed once and its nodes are shared by its occurrences (the parser reads nodes, never
    changes them). A line that is not whole alone (an open bracket, a backslash, an indented
    block, a line continued from one that is not) fails that parse, and the text is then parsed
    whole, with Python's own error where there is one."""
    if source.isascii() and not any(end in source for end in _OTHER_LINE_ENDS):
        lines = source.split("\n")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntaxWarning)
                parsed = {line: ast.parse(line, mode="exec").body for line in dict.fromkeys(lines)}
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass  # parsed whole below, where Python's error and its position are the text's own
        else:
            return [(before, statement) for before, line in enumerate(lines) for statement in parsed[line]]
    return [(0, statement) for statement in python_parse(source).body]


def python_parse(source: str) -> ast.Module:
    """Python's own parse of `source`; its errors as ParseError or LimitError with a span."""
    try:
        with warnings.catch_warnings():
            # Python warns on stderr about "1or x" (invalid decimal literal); the refusal says it.
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.parse(source, mode="exec")
    except SyntaxError as err:
        line = err.lineno or 1
        col = max((err.offset or 1) - 1, 0)
        span = Span(line, col, line, col + 1)
        message = err.msg
        if "too many nested parentheses" in message:
            raise LimitError("the expression nests parentheses more than 200 levels deep", span=span) from None
        if message.startswith("invalid syntax"):
            message = "invalid syntax"
        raise ParseError(message, span=span) from None
    except (RecursionError, MemoryError):
        from .._deep import reduced_stack, too_deep_for_stack

        if reduced_stack() is not None:  # an address-space cap took the deep thread's stack
            raise too_deep_for_stack() from None
        # Python's own parser gives up on right-nested chains long before MAX_DEPTH:
        # about 3,000 levels of a**b**c... and 6,000 of unary minus (left-nested sums
        # and method chains are fine up to MAX_DEPTH).
        raise LimitError(
            "the expression is nested too deeply for Python's parser (it allows about "
            "3,000 levels of a**b**... and 6,000 of unary minus)",
            hint="bind parts to names: h = ...; h = h ** 2; ...",
        ) from None
    except ValueError as err:  # e.g. source code cannot contain null bytes
        raise ParseError(str(err)) from None
