"""Write an expression AST back as text in the language, with only the parentheses it needs.

A rewrite (language/rewrites.py) is AST to AST; the user gets text to paste, and the proof
parses that same text again, so what is shown is exactly what was checked.
"""

from __future__ import annotations

from . import nodes as n
from .ops import OPS

#: Binding strength of each binary operator (Python's): higher binds tighter.
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "@": 2, "**": 4}
_UNARY = 3
_ATOM = 5


def to_source(node: n.Expr) -> str:
    """`node` as text that parses back to an equal AST."""
    return _text(node)[0]


def program_source(program: n.Program) -> str:
    """A whole program: its statements and output, `;`-separated."""
    parts = [f"{s.name} = {to_source(s.value)}" for s in program.statements]
    return "; ".join([*parts, to_source(program.output)])


def _text(node: n.Expr) -> tuple[str, int]:
    if isinstance(node, n.Num):
        value = node.value
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
            return f"{value:.1f}", _ATOM if value >= 0 else _UNARY
        return repr(value), _ATOM if not (isinstance(value, (int, float)) and value < 0) else _UNARY
    if isinstance(node, n.Const):
        return node.name, _ATOM
    if isinstance(node, n.Name):
        return node.id, _ATOM
    if isinstance(node, n.Tuple):
        items = [to_source(i) for i in node.items]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")", _ATOM
    if isinstance(node, n.UnaryOp):
        return node.op + _wrap(node.operand, _UNARY), _UNARY
    if isinstance(node, n.BinOp):
        level = _PRECEDENCE[node.op]
        if node.op == "**":  # right-associative, and binds tighter than a unary minus on its left
            return f"{_wrap(node.left, _ATOM)} ** {_wrap(node.right, _UNARY)}", level
        return f"{_wrap(node.left, level)} {node.op} {_wrap(node.right, level + 1)}", level
    if isinstance(node, n.Compare):
        return f"{_wrap(node.left, 1)} {node.op} {_wrap(node.right, 1)}", 0
    if isinstance(node, n.Str):
        return repr(node.value), _ATOM
    if isinstance(node, n.Special):
        return node.name, _ATOM
    if isinstance(node, n.Slice):
        parts = ["" if part is None else to_source(part) for part in (node.start, node.stop, node.step)]
        return (":".join(parts) if node.step is not None else ":".join(parts[:2])), _ATOM
    if isinstance(node, n.Field):
        base = _wrap(node.value, _ATOM)
        return (f"{base}[{node.name!r}]" if node.key else f"{base}.{node.name}"), _ATOM
    if isinstance(node, n.Call) and node.func == "getitem":
        items = node.args[1].items if isinstance(node.args[1], n.Tuple) else (node.args[1],)
        text = ", ".join(_index_text(item) for item in items)
        return f"{_wrap(node.args[0], _ATOM)}[{text}{',' if len(items) == 1 and isinstance(items[0], n.Tuple) else ''}]", _ATOM
    if isinstance(node, n.Call) and OPS.get(node.func) is not None and OPS[node.func].form == "attribute":
        return f"{_wrap(node.args[0], _ATOM)}.{node.func}", _ATOM
    if isinstance(node, n.Call):
        args = [to_source(a) for a in node.args]
        kwargs = [f"{k}={to_source(v)}" for k, v in node.kwargs]
        if node.method:
            receiver = _wrap(node.args[0], _ATOM)
            return f"{receiver}.{node.func}({', '.join([*args[1:], *kwargs])})", _ATOM
        return f"{node.func}({', '.join([*args, *kwargs])})", _ATOM
    raise TypeError(f"no source form for {type(node).__name__}")


def _index_text(item: n.Expr) -> str:
    if isinstance(item, n.Tuple):  # an integer list inside a subscript
        return "[" + ", ".join(to_source(i) for i in item.items) + "]"
    return to_source(item)


def _wrap(node: n.Expr, needed: int) -> str:
    text, level = _text(node)
    return text if level >= needed else f"({text})"
