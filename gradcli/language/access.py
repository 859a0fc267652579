"""The parser's attributes and subscripts: `out.logits`, `out["logits"]`, `x.T`, `x[:, :-1]`.

Python reads `x.name` and `x[...]` alike whatever `x` is; the language gives them three
meanings, decided here from the text alone: `x.T` and `x.mT` are rows of the operations table
(form "attribute"), `x[...]` is the row `getitem` with its index items as nodes (slices, None,
..., integer lists, masks), and any other name is a part of a model's output (`out.logits`,
`out["logits"]`), which only the torch builder can look up. Dunder names and a tensor's own
attributes (`x.data`, `x.grad`) are refused with their position.
"""

from __future__ import annotations

import ast
from typing import Any

from ..errors import ParseError
from . import nodes as n
from .ops import OPS

#: A tensor's own attributes: never a model output's field, and not part of the language.
_TENSOR_ATTRIBUTES = frozenset({
    "data", "grad", "grad_fn", "real", "imag", "shape", "dtype", "device", "requires_grad", "is_leaf", "ndim",
    "H", "mH", "layout", "names", "output_nr", "itemsize", "nbytes", "is_cuda", "retains_grad",
})


class AccessParser:
    """Mixed into the parser (language/parser.py), which gives expr, span, _size, functions."""

    expr: Any
    span: Any
    _size: Any
    functions: Any

    def visit_Attribute(self, node: ast.Attribute) -> n.Expr:
        name = node.attr
        if name.startswith("_") or name in _TENSOR_ATTRIBUTES:
            raise ParseError("attribute access is not part of the language", span=self.span(node),
                             hint="attributes are a model output's fields (out.logits) and x.T / x.mT")
        op = OPS.get(name)
        if op is not None and op.form == "attribute":
            return n.Call(name, (self.expr(node.value),), method=True, span=self.span(node))
        if op is not None or name in self.functions:
            raise ParseError(f"'{name}' is a method: call it", span=self.span(node), hint=f"x.{name}(...)")
        # Anything else names a part of a model's output (out.logits): the builder looks it up.
        return n.Field(self.expr(node.value), name, span=self.span(node))

    def visit_Subscript(self, node: ast.Subscript) -> n.Expr:
        value = self.expr(node.value)
        index = node.slice
        if isinstance(index, ast.Constant) and isinstance(index.value, str):
            return n.Field(value, index.value, key=True, span=self.span(node))  # out["logits"]
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        if not items:
            raise ParseError("an empty subscript x[()] is not part of the language", span=self.span(node))
        converted = n.Tuple(tuple(self._index_item(item) for item in items), span=self.span(index))
        return n.Call("getitem", (value, converted), span=self.span(node))

    def _index_item(self, item: ast.AST) -> n.Expr:
        if isinstance(item, ast.Slice):
            parts = (None if part is None else self.expr(part) for part in (item.lower, item.upper, item.step))
            return n.Slice(*parts, span=self.span(item))
        if isinstance(item, ast.Constant) and (item.value is None or item.value is Ellipsis):
            return n.Special("None" if item.value is None else "...", span=self.span(item))
        if isinstance(item, (ast.List, ast.Tuple)):
            if not item.elts:
                raise ParseError("an empty list is no index", span=self.span(item))
            return n.Tuple(tuple(self._size(element) for element in item.elts), span=self.span(item))
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            raise ParseError("a string picks a part of a model output on its own: out[\"logits\"]",
                             span=self.span(item))
        # An int, an integer tensor, or a boolean mask (a comparison: x[y > 0]).
        return self.expr(item, condition=isinstance(item, ast.Compare))
