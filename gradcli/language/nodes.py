"""The expression AST: what the parser produces and both interpreters read.

Nodes are frozen dataclasses; their `span` (where in the input they came from) is left out
of `==` and `repr`, so `parse("x+1") == parse("x + 1")`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Union

from ..errors import Span


def _span() -> Span | None:
    return field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Num:
    """A numeric (or boolean, for `keepdim=True`) literal."""

    value: int | float | bool
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class Const:
    """A named mathematical constant: `pi` or `e`."""

    name: str
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class Name:
    """A variable (a leaf tensor) or an intermediate bound by an earlier statement."""

    id: str
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class Tuple:
    """A tuple or list of integers, only as an argument (`dim=(0, 1)`)."""

    items: tuple["Expr", ...]
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class UnaryOp:
    """`-a` or `+a`."""

    op: str
    operand: "Expr"
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class BinOp:
    """`a + b`, `a - b`, `a * b`, `a / b`, `a ** b`, `a @ b`."""

    op: str
    left: "Expr"
    right: "Expr"
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class Compare:
    """`a > b`, `a >= b`, `a < b`, `a <= b`: only as the condition of `where`."""

    op: str
    left: "Expr"
    right: "Expr"
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class Call:
    """`f(a, b, dim=0)`, or the method form `a.f(b)` (then `method` is true, `a` is args[0])."""

    func: str
    args: tuple["Expr", ...]
    kwargs: tuple[tuple[str, "Expr"], ...] = ()
    method: bool = False
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class Str:
    """A string literal: only a listed choice of an option (`reduction="sum"`) or a key of a
    model output (`out["logits"]`)."""

    value: str
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class Slice:
    """`start:stop:step` inside a subscript; a missing part is None."""

    start: "Expr | None"
    stop: "Expr | None"
    step: "Expr | None"
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class Special:
    """`None` (a new axis) or `...` (every other axis) inside a subscript."""

    name: str  # "None" or "..."
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class Field:
    """`out.logits` (or `out["logits"]`, then `key` is true): a named part of a model's output
    (a dict, a dataclass, transformers' ModelOutput). Only the torch builder gives it a value."""

    value: "Expr"
    name: str
    key: bool = False
    span: Span | None = _span()


Expr = Union[Num, Const, Name, Tuple, UnaryOp, BinOp, Compare, Call, Str, Slice, Special, Field]


@dataclass(frozen=True, slots=True)
class Assign:
    """`name = value`: binds an intermediate that the trace labels."""

    name: str
    value: Expr
    span: Span | None = _span()


@dataclass(frozen=True, slots=True)
class Program:
    """Statements in order; the last one is an expression, the output."""

    statements: tuple[Assign, ...]
    output: Expr
    variables: tuple[str, ...]
    source: str = field(default="", compare=False, repr=False)


BINARY_OPS = {"+", "-", "*", "/", "**", "@"}
COMPARISONS = {">", ">=", "<", "<=", "==", "!="}
CONSTANTS = {"pi", "e"}
#: Every expression node class, for isinstance checks.
EXPR_TYPES = (Num, Const, Name, Tuple, UnaryOp, BinOp, Compare, Call, Str, Slice, Special, Field)


#: The expression nodes that hold no other expression.
LEAF_TYPES = frozenset({Num, Const, Name, Str, Special})


def children(node: Expr) -> tuple[Expr, ...]:
    """The expressions directly inside `node`, in source order."""
    # The two commonest kinds first, by exact type (every walk of a program asks this of each
    # node: a 20,000-line chain's 40,000): a call without keywords, and a leaf.
    kind = type(node)
    if kind is Call and not node.kwargs:
        return node.args
    if kind in LEAF_TYPES:
        return ()
    if isinstance(node, Call):
        return (*node.args, *(value for _, value in node.kwargs))
    if isinstance(node, (BinOp, Compare)):
        return (node.left, node.right)
    if isinstance(node, UnaryOp):
        return (node.operand,)
    if isinstance(node, Tuple):
        return node.items
    if isinstance(node, Slice):
        return tuple(part for part in (node.start, node.stop, node.step) if part is not None)
    if isinstance(node, Field):
        return (node.value,)
    return ()


def walk(*roots: Expr) -> Iterator[Expr]:
    """Every node under `roots`, roots included; iterative, so any depth is fine."""
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))
