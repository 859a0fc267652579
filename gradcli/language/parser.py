"""Parse expression text into gradcli's AST with an allow-list over Python's `ast`.

Python's own parser does the tokenising and precedence; this module then walks its tree and
accepts only the constructs the language has (README.md, "The expression language"),
converting each into a node of `nodes.py`. Anything else (attributes, subscripts, lambdas,
strings, ...) is refused with its position (the messages are worded in `refusals.py`, calls
are matched to their signatures by `signatures.py`). Nothing is ever evaluated: the result
is data for the interpreters.
"""

from __future__ import annotations

import ast
import math
from types import MappingProxyType
from typing import Mapping

from .. import limits
from .._deep import run_deep
from .._quiet_gc import paused_gc
from ..errors import (
    ArgumentError,
    GradcliError,
    LimitError,
    ParseError,
    Span,
    UnknownNameError,
    split_lines,
)
from . import nodes as n
from .access import AccessParser
from .ops import OPS, Param
from .refusals import BINOP_HINTS, MODULE_PREFIXES, did_you_mean, op_text, python_statements, refusal
from .signatures import Signature, bind, is_constant, is_dim, signature_text

_BINOPS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.MatMult: "@",
}
_CMPOPS = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!="}
_UNARY = {ast.USub: "-", ast.UAdd: "+"}


def parse(
    source: str,
    functions: Mapping[str, Signature] = MappingProxyType({}),
    *,
    what: str = "expression",
    allowed_variables: tuple[str, ...] | None = None,
) -> n.Program:
    """Parse `source` into a `Program`, or raise a `GradcliError` that points into it.

    `functions` are the callable named functions beyond the operations table (which always
    applies): anything with a name and params, by name. The expression library passes its
    own while it parses its bodies, and `pipeline.parse` passes the library's, so the parser
    knows no library: the library depends on the parser, never the reverse.
    `allowed_variables`, when given, is the complete list of free names allowed (a library
    body may only use its parameters).
    """
    try:
        with paused_gc():  # a long program allocates many objects and no cycles
            return run_deep(_Parser(source, functions, allowed_variables).program)
    except GradcliError as err:
        raise err.at(source, what)


class _Parser(AccessParser):
    def __init__(
        self,
        source: str,
        functions: Mapping[str, Signature],
        allowed_variables: tuple[str, ...] | None,
    ) -> None:
        self.source = source
        self.functions = functions
        self.allowed_variables = allowed_variables
        self.lines = split_lines(source)
        self.ascii = [line.isascii() for line in self.lines]
        self.all_ascii = all(self.ascii)
        self.count = 0
        self.depth = 0
        self.lines_before = 0  # the statement being read: its nodes' line numbers are its own (refusals.py)
        self.bound: set[str] = set()
        self.allowed_names: set[str] = set()  # names _check_identifier accepted: each asked once
        self.variables: list[str] = []

    # -- entry -------------------------------------------------------------------------------
    def program(self) -> n.Program:
        source = self.source
        if len(source) > limits.MAX_SOURCE_CHARS:
            raise LimitError(
                f"the expression is {len(source):,} characters long; the limit is "
                f"{limits.MAX_SOURCE_CHARS:,}"
            )
        if "\x00" in source:
            raise ParseError("the expression contains a null byte", span=self._offset_span(source.index("\x00")))
        if not source.strip():
            raise ParseError("the expression is empty", hint='give one, e.g. "x.pow(2).sum()"')
        body = python_statements(source)
        if len(body) > limits.MAX_STATEMENTS:
            raise LimitError(
                f"the program has {len(body):,} statements; the limit is {limits.MAX_STATEMENTS:,}"
            )
        if not body:
            raise ParseError("the expression is empty", hint='give one, e.g. "x.pow(2).sum()"')
        statements: list[n.Assign] = []
        output: n.Expr | None = None
        final = len(body) - 1
        for index, (lines_before, stmt) in enumerate(body):
            self.lines_before = lines_before
            last = index == final
            if isinstance(stmt, ast.Assign):
                assign = self.assign(stmt)
                statements.append(assign)
                if last:
                    output = n.Name(assign.name, span=assign.span)
            elif isinstance(stmt, ast.Expr):
                if not last:
                    raise ParseError(
                        "only the last statement can be a bare expression",
                        span=self.span(stmt),
                        hint="bind it to a name (h = ...) or remove it",
                    )
                output = self.expr(stmt.value)
            elif isinstance(stmt, ast.AugAssign):
                raise ParseError(
                    "augmented assignment (+=) is not part of the language",
                    span=self.span(stmt),
                    hint="write h = h + x (in PyTorch, += on a tensor is an in-place operation)",
                )
            else:
                raise ParseError(
                    f"'{type(stmt).__name__.lower()}' statements are not part of the language",
                    span=self.span(stmt),
                    hint="statements are assignments (h = ...) and a final expression",
                )
        assert output is not None
        return n.Program(tuple(statements), output, tuple(self.variables), source=source)

    # -- positions ---------------------------------------------------------------------------
    def _col(self, line: int, byte_col: int) -> int:
        # ast gives UTF-8 byte offsets; carets need character columns.
        if line - 1 < len(self.lines) and not self.ascii[line - 1]:
            return len(self.lines[line - 1].encode()[:byte_col].decode("utf-8", "ignore"))
        return byte_col

    def span(self, node: ast.AST) -> Span:
        # Called for every node: a 20,000-statement program makes 60,000 spans.
        end_col = node.end_col_offset  # type: ignore[attr-defined]
        before = self.lines_before
        if self.all_ascii and end_col is not None:
            return Span(node.lineno + before, node.col_offset, node.end_lineno + before, end_col)  # type: ignore[attr-defined]
        line = node.lineno + before  # type: ignore[attr-defined]
        end_line = (node.end_lineno or node.lineno) + before  # type: ignore[attr-defined]
        col = node.col_offset  # type: ignore[attr-defined]
        if end_col is None:
            end_col = col + 1
        if not self.all_ascii:
            col, end_col = self._col(line, col), self._col(end_line, end_col)
        return Span(line, col, end_line, end_col)

    def _offset_span(self, offset: int) -> Span:
        line = self.source.count("\n", 0, offset) + 1
        col = offset - (self.source.rfind("\n", 0, offset) + 1)
        return Span(line, col, line, col + 1)

    # -- statements --------------------------------------------------------------------------
    def assign(self, stmt: ast.Assign) -> n.Assign:
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            raise ParseError(
                "an assignment binds exactly one name (h = ...)", span=self.span(stmt.targets[0])
            )
        target = stmt.targets[0]
        name = target.id
        if name not in self.allowed_names:
            self._check_identifier(name, target)
        if name in n.CONSTANTS:
            raise ParseError(f"'{name}' is a constant and cannot be assigned", span=self.span(target))
        value = self.expr(stmt.value)
        self.bound.add(name)
        return n.Assign(name, value, span=self.span(stmt))

    def _check_identifier(self, name: str, node: ast.AST) -> str:
        if name.startswith("__") or not name.isidentifier():
            raise ParseError(f"the name '{name}' is not allowed", span=self.span(node),
                             hint="names starting with '__' are reserved")
        self.allowed_names.add(name)
        return name

    # -- expressions -------------------------------------------------------------------------
    def expr(self, node: ast.AST, *, condition: bool = False) -> n.Expr:
        self.count += 1
        if self.count > limits.MAX_AST_NODES:
            raise LimitError(
                f"the expression has more than {limits.MAX_AST_NODES:,} nodes", span=self.span(node)
            )
        self.depth += 1
        if self.depth > limits.MAX_DEPTH:
            raise LimitError(
                f"the expression is nested more than {limits.MAX_DEPTH:,} levels deep",
                span=self.span(node),
            )
        try:
            if condition:  # the caller checked that node is a Compare
                return self.visit_Compare(node, condition=True)  # type: ignore[arg-type]
            visit = _VISITORS.get(type(node))
            if visit is None:
                raise self._refuse(node)
            return visit(self, node)
        finally:
            self.depth -= 1

    def _refuse(self, node: ast.AST) -> ParseError:
        message, hint = refusal(node)
        return ParseError(message, span=self.span(node), hint=hint)

    def visit_Constant(self, node: ast.Constant) -> n.Expr:
        value = node.value
        if isinstance(value, bool):
            # True/False only as keepdim=...: arithmetic on booleans means nothing to sympy.
            raise ParseError(
                f"'{value}' is only allowed as a True/False argument such as keepdim={value}",
                span=self.span(node),
            )
        if isinstance(value, str):
            raise ParseError("strings are not part of the language", span=self.span(node))
        if isinstance(value, int):
            if abs(value) > limits.MAX_CONSTANT:
                raise LimitError(
                    f"the number is larger than {limits.MAX_CONSTANT:g}", span=self.span(node)
                )
            return n.Num(value, span=self.span(node))
        if isinstance(value, float):
            if not math.isfinite(value):
                raise LimitError("the number overflows a float64", span=self.span(node))
            if abs(value) > limits.MAX_CONSTANT:
                raise LimitError(f"the number is larger than {limits.MAX_CONSTANT:g}", span=self.span(node))
            return n.Num(value, span=self.span(node))
        kind = "complex numbers are" if isinstance(value, complex) else f"'{value!r}' is"
        raise ParseError(f"{kind} not part of the language", span=self.span(node))

    def visit_Name(self, node: ast.Name) -> n.Expr:
        name = node.id
        if name in n.CONSTANTS:
            return n.Const(name, span=self.span(node))
        if name not in self.allowed_names:
            self._check_identifier(name, node)
        if name not in self.bound:
            if self.allowed_variables is not None and name not in self.allowed_variables:
                raise UnknownNameError(
                    f"unknown name '{name}'",
                    span=self.span(node),
                    hint=did_you_mean(name, self.allowed_variables)
                    or f"the names here are: {', '.join(self.allowed_variables)}",
                )
            if (name in OPS and OPS[name].function and OPS[name].form == "call") or name in self.functions:
                raise ParseError(
                    f"'{name}' is a function; call it", span=self.span(node), hint=f"{name}(x)"
                )
            if name not in self.variables:
                self.variables.append(name)
        return n.Name(name, span=self.span(node))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> n.Expr:
        op = _UNARY.get(type(node.op))
        if op is None:
            raise ParseError(
                f"the operator '{op_text(node.op)}' is not part of the language", span=self.span(node)
            )
        return n.UnaryOp(op, self.expr(node.operand), span=self.span(node))

    def visit_BinOp(self, node: ast.BinOp) -> n.Expr:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise ParseError(
                f"the operator '{op_text(node.op)}' is not part of the language",
                span=self.span(node),
                hint=BINOP_HINTS.get(type(node.op)),
            )
        return n.BinOp(op, self.expr(node.left), self.expr(node.right), span=self.span(node))

    def visit_Compare(self, node: ast.Compare, *, condition: bool = False) -> n.Expr:
        if not condition:
            raise ParseError(
                "comparisons are only allowed as the condition of where(...)",
                span=self.span(node),
                hint="e.g. where(x > 0, x, 0.1 * x)",
            )
        if len(node.ops) != 1:
            raise ParseError(
                "chained comparisons are not part of the language", span=self.span(node),
                hint="nest where(...) calls instead",
            )
        op = _CMPOPS.get(type(node.ops[0]))
        if op is None:
            raise ParseError(
                f"the comparison '{op_text(node.ops[0])}' is not part of the language",
                span=self.span(node),
                hint="use >, >=, <, <=, == or !=",
            )
        return n.Compare(op, self.expr(node.left), self.expr(node.comparators[0]), span=self.span(node))

    def visit_Call(self, node: ast.Call) -> n.Expr:
        func = node.func
        if isinstance(func, ast.Name):
            name, method, receiver = func.id, False, None
        elif isinstance(func, ast.Attribute):
            name, method, receiver = func.attr, True, func.value
        else:
            raise ParseError("only named functions can be called", span=self.span(func))
        if method and isinstance(receiver, ast.Name) and receiver.id in MODULE_PREFIXES:
            # torch.exp(x) would otherwise read as the method exp on a variable 'torch'.
            raise ParseError(f"module prefixes ({receiver.id}.) are not part of the language",
                             span=self.span(func), hint=f"call {name}(...) without the prefix")
        signature = self._lookup(name, method, func)
        for keyword in node.keywords:
            if keyword.arg is None:
                raise ParseError("'**' arguments are not part of the language", span=self.span(keyword))
        params = signature.params
        args: list[n.Expr] = []
        if method:
            args.append(self.expr(receiver))
        for index, arg in enumerate(node.args):
            position = len(args)
            param = params[position] if position < len(params) else None
            if param is not None and param.variadic:
                # reshape(2, 3) and reshape((2, 3)) are the same call, as in torch.
                rest = node.args[index:]
                if len(rest) == 1 and isinstance(rest[0], (ast.Tuple, ast.List)):
                    args.append(self._argument(rest[0], param))
                else:
                    items = tuple(self._size(item) for item in rest)
                    args.append(n.Tuple(items, span=self._join(rest)))
                break
            args.append(self._argument(arg, param))
        kwargs: list[tuple[str, n.Expr]] = []
        by_name = {p.name: p for p in params} if node.keywords else {}
        for keyword in node.keywords:
            param = by_name.get(keyword.arg)
            if param is None:
                raise ArgumentError(
                    f"{name}() has no parameter '{keyword.arg}'",
                    span=self.span(keyword),
                    hint=did_you_mean(keyword.arg, list(by_name))
                    or f"its signature is {signature_text(signature)}",
                )
            kwargs.append((keyword.arg, self._argument(keyword.value, param)))
        call = n.Call(name, tuple(args), tuple(kwargs), method=method, span=self.span(node))
        bind(signature, call)
        return call

    def _lookup(self, name: str, method: bool, func: ast.AST) -> Signature:
        op = OPS.get(name)
        if op is not None and op.form != "call":
            written = "x[...]" if op.form == "subscript" else f"x.{name}"
            raise ParseError(f"'{name}' is not called: write {written}", span=self.span(func))
        if op is not None and not method and not op.function:
            raise ParseError(f"'{name}' has only a method form", span=self.span(func),
                             hint=f"write x.{name}(...), as torch does")
        if method:
            if op is not None and op.method:
                return op
            if op is not None or name in self.functions:
                raise ParseError(
                    f"'{name}' has no method form",
                    span=self.span(func),
                    hint=f"call it as a function: {name}(x, ...)",
                )
            if name.startswith("_"):
                raise ParseError("attribute access is not part of the language", span=self.span(func),
                                 hint="only method calls on the operations whitelist are allowed")
            methods = [o.name for o in OPS.values() if o.method]
            raise UnknownNameError(
                f"unknown method '{name}'",
                span=self.span(func),
                hint=did_you_mean(name, methods) or "`gradcli list` shows the operations",
            )
        if op is not None:
            return op
        if name in self.functions:
            return self.functions[name]
        raise UnknownNameError(
            f"unknown function '{name}'",
            span=self.span(func),
            hint=did_you_mean(name, [*OPS, *self.functions])
            or "`gradcli list` shows the operations and the expression library",
        )

    def _argument(self, node: ast.AST, param: Param | None) -> n.Expr:
        kind = param.kind if param is not None else "tensor"
        if param is not None and param.default is None and isinstance(node, ast.Constant) and node.value is None:
            return n.Special("None", span=self.span(node))  # weight=None, dim=None: the default
        if kind == "cond":
            if not isinstance(node, ast.Compare):
                raise ParseError(
                    f"the {param.name} of where(...) must be a comparison",  # type: ignore[union-attr]
                    span=self.span(node),
                    hint="e.g. where(x > 0, x, 0.1 * x)",
                )
            return self.expr(node, condition=True)
        if kind == "mask":
            # A comparison (ids == 0), or a boolean tensor by name (masked_fill(x, pad, 0)).
            return self.expr(node, condition=isinstance(node, ast.Compare))
        if kind == "choice":
            return self._choice(node, param)  # type: ignore[arg-type]
        if kind == "tensors":
            if not isinstance(node, (ast.List, ast.Tuple)) or not node.elts:
                raise ArgumentError(f"'{param.name}' must be a list of tensors, e.g. [a, b]",  # type: ignore[union-attr]
                                    span=self.span(node))
            return n.Tuple(tuple(self.expr(item) for item in node.elts), span=self.span(node))
        if kind == "sizes":
            if isinstance(node, (ast.List, ast.Tuple)):
                return n.Tuple(tuple(self._size(item) for item in node.elts), span=self.span(node))
            return self._size(node)
        if kind == "bool" and isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return n.Num(node.value, span=self.span(node))
        if kind == "dim" and isinstance(node, (ast.Tuple, ast.List)):
            value: n.Expr = n.Tuple(tuple(self.expr(item) for item in node.elts), span=self.span(node))
        else:
            value = self.expr(node)
        if kind == "dim" and not is_dim(value):
            raise ArgumentError(
                f"'{param.name}' must be an integer or a tuple of integers, written literally",
                span=self.span(node),
            )
        if kind == "bool" and not (isinstance(value, n.Num) and isinstance(value.value, bool)):
            raise ArgumentError(f"'{param.name}' must be True or False", span=self.span(node))
        if kind == "number" and not is_constant(value):
            raise ArgumentError(
                f"'{param.name}' must be a constant (a number, pi, e, or arithmetic on them)",
                span=self.span(node),
            )
        return value


    def _size(self, node: ast.AST) -> n.Expr:
        """One size of reshape(-1, V): any expression, which the builders read as an integer."""
        if isinstance(node, (ast.List, ast.Tuple)):
            raise ArgumentError("sizes are integers, not nested lists", span=self.span(node))
        return self.expr(node)

    def _join(self, nodes: list[ast.AST]) -> Span:
        first, last = self.span(nodes[0]), self.span(nodes[-1])
        return Span(first.line, first.col, last.end_line, last.end_col)

    def _choice(self, node: ast.AST, param: Param) -> n.Expr:
        listed = ", ".join(repr(c) for c in param.choices)
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            raise ArgumentError(f"'{param.name}' is one of {listed}", span=self.span(node))
        if node.value not in param.choices:
            raise ArgumentError(f"'{param.name}' is one of {listed}, not {node.value!r}", span=self.span(node),
                                hint=did_you_mean(node.value, param.choices))
        return n.Str(node.value, span=self.span(node))


#: Python node type -> the method that converts it; any other node type is refused.
_VISITORS = {
    ast.Constant: _Parser.visit_Constant,
    ast.Name: _Parser.visit_Name,
    ast.UnaryOp: _Parser.visit_UnaryOp,
    ast.BinOp: _Parser.visit_BinOp,
    ast.Compare: _Parser.visit_Compare,
    ast.Call: _Parser.visit_Call,
    ast.Attribute: _Parser.visit_Attribute,
    ast.Subscript: _Parser.visit_Subscript,
}
