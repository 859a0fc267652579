"""How large a program becomes once its library calls are inlined.

Both interpreters build a library entry's body afresh at every call, so entries that call
each other twice per level grow as 2**levels: forty such one-line entries make a program of
three tokens build 2**40 operations. The parser's node limit counts the text; this counts
what the interpreters would build, and refuses it before they start.
"""

from __future__ import annotations

from typing import Any, Mapping

from .. import limits
from ..errors import LimitError
from . import nodes as n
from .ops import OPS


def expanded_nodes(program: n.Program, functions: Mapping[str, Any]) -> int:
    """The nodes of `program` with every library call replaced by its entry's body."""
    sizes: dict[str, int] = {}
    return _program_size(program, functions, sizes)


def check_expansion(program: n.Program, functions: Mapping[str, Any]) -> int:
    """Refuse a program whose inlined size is beyond MAX_AST_NODES; else return the size."""
    size = expanded_nodes(program, functions)
    if size > limits.MAX_AST_NODES:
        shown = f"{size:,}" if size < 10**15 else f"about 10^{len(str(size)) - 1}"
        raise LimitError(
            f"with its library calls inlined the expression has {shown} nodes; the limit is "
            f"{limits.MAX_AST_NODES:,}",
            hint="a library entry that calls others several times multiplies their size at each level",
        )
    return size


def _program_size(program: n.Program, functions: Mapping[str, Any], sizes: dict[str, int]) -> int:
    # n.walk's loop, inlined: this runs on every command, over every node of the program
    # (80,000 for a 20,000-line chain), and the generator's per-node cost was half of it.
    stack: list[n.Expr] = [s.value for s in program.statements] + [program.output]
    children, call, leaves = n.children, n.Call, n.LEAF_TYPES
    total = 0
    while stack:
        node = stack.pop()
        total += 1
        kind = type(node)
        if kind in leaves:
            continue
        if kind is call and node.func in functions and node.func not in OPS:
            total += _entry_size(node.func, functions, sizes)
        stack.extend(children(node))
    return total


def _entry_size(name: str, functions: Mapping[str, Any], sizes: dict[str, int]) -> int:
    # Entries cannot call themselves (the library refuses cycles), so this recursion ends;
    # its depth is the longest chain of entries, and each entry is measured once.
    if name not in sizes:
        sizes[name] = _program_size(functions[name].body, functions, sizes)
    return sizes[name]
