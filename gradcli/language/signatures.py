"""Signatures: matching a call's arguments to an operation's or library function's params.

The parser checks every call against its signature once, with positions for the error; the
interpreters bind arguments to parameter names with the same `bind`, so a call means the
same thing to the parser, the torch builder and the sympy translator.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import ArgumentError
from . import nodes as n
from .ops import Param, format_params


class Signature(Protocol):
    """Anything with a name and params: an `ops.Op` or a library function."""

    name: str
    params: tuple[Param, ...]


def bind(signature: Signature, call: n.Call) -> dict[str, n.Expr | Any]:
    """Match a call's arguments to the signature like Python does: {param: node or default}."""
    params = signature.params
    if len(call.args) > len(params):
        raise ArgumentError(
            f"{call.func}() takes at most {len(params)} argument"
            f"{'s' if len(params) != 1 else ''} ({len(call.args)} given)",
            span=call.span,
            hint=f"its signature is {signature_text(signature)}",
        )
    bound: dict[str, Any] = {p.name: a for p, a in zip(params, call.args)}
    for key, value in call.kwargs:
        if key in bound:
            raise ArgumentError(f"{call.func}() got '{key}' twice", span=call.span)
        bound[key] = value
    for p in params:
        if p.name not in bound:
            if p.required:
                raise ArgumentError(
                    f"{call.func}() is missing its argument '{p.name}'",
                    span=call.span,
                    hint=f"its signature is {signature_text(signature)}",
                )
            bound[p.name] = p.default
    return bound


def signature_text(signature: Signature) -> str:
    """How `--help` and error hints write a signature: `clamp(input, min=None, max=None)`."""
    return f"{signature.name}({format_params(signature.params)})"


def is_dim(node: n.Expr) -> bool:
    """Whether a node is a literal integer, or a non-empty flat tuple of them (`dim=(0, -1)`)."""
    if isinstance(node, n.Num):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, n.UnaryOp) and node.op == "-":
        return is_dim(node.operand) and not isinstance(node.operand, n.Tuple)
    if isinstance(node, n.Tuple):
        return bool(node.items) and all(is_dim(i) and not isinstance(i, n.Tuple) for i in node.items)
    return False


def is_constant(node: n.Expr) -> bool:
    """Whether a node is arithmetic on numbers and constants only (no variables or calls)."""
    if isinstance(node, (n.Num, n.Const)):
        return True
    if isinstance(node, n.UnaryOp):
        return is_constant(node.operand)
    if isinstance(node, n.BinOp):
        return node.op != "@" and is_constant(node.left) and is_constant(node.right)
    return False
