"""Interpret the AST with sympy: the exact formula the expression computes.

Values are numpy object arrays of sympy expressions: 0-d for the usual scalar use (one
symbol per variable, the expression read elementwise), n-d when a variable is given as an
array of symbols (one per element), which is how reductions, softmax and matmul get an
exact meaning. Operators and broadcasting are numpy's; each operation's meaning is its row
in `ops.py`. sigmoid becomes 1/(1+exp(-x)), where a Piecewise, and so on.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

from .. import limits
from .._deep import run_deep
from ..errors import ArgumentError, DomainError, GradcliError, LimitError, ShapeError, UnknownNameError, UsageError
from ..language import nodes as n
from ..language.ops import OPS, Op
from ..language.signatures import bind
from .interpreter import Interpreter

if TYPE_CHECKING:
    from ..language.library import Library

_TENSOR_KINDS = ("tensor", "scalar", "cond")


def to_sympy(
    program: n.Program,
    values: Mapping[str, Any],
    *,
    library: "Library | None" = None,
) -> Any:
    """The sympy value of `program`: a sympy expression when every value is a scalar
    (a Symbol or expression), else a numpy object array of them."""
    if library is None:
        from ..language.library import default_library

        library = default_library()
    translator = _SympyTranslator(values, library)
    try:
        result = run_deep(translator.program, program)
    except GradcliError as err:
        raise err.at(program.source)
    return result.item() if result.ndim == 0 else result


def symbolic_number(value: int | float | bool) -> Any:
    """A literal as an exact sympy number: 0.1 is 1/10, as written, not its binary float."""
    import sympy

    if isinstance(value, bool):
        return sympy.true if value else sympy.false
    if isinstance(value, int):
        return sympy.Integer(value)
    if value.is_integer():
        return sympy.Integer(int(value))
    return sympy.Rational(repr(value))


class _SympyTranslator(Interpreter):
    what = "sympy translator"

    def __init__(self, values: Mapping[str, Any], library: "Library") -> None:
        import numpy
        import sympy

        self.sp = sympy
        self.np = numpy
        self.library = library
        self.env = {name: self._array(v) for name, v in values.items()}

    def _array(self, value: Any) -> Any:
        np = self.np
        if isinstance(value, np.ndarray):
            return value.astype(object, copy=False)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = symbolic_number(value)
        array = np.empty((), dtype=object)
        array[()] = value
        return array

    def program(self, program: n.Program) -> Any:
        for statement in program.statements:
            self.env[statement.name] = self.visit(statement.value)
        return self.visit(program.output)

    def visit_Num(self, node: n.Num) -> Any:
        return self._array(symbolic_number(node.value))

    def visit_Const(self, node: n.Const) -> Any:
        return self._array(self.sp.pi if node.name == "pi" else self.sp.E)

    def visit_Name(self, node: n.Name) -> Any:
        try:
            return self.env[node.id]
        except KeyError:
            raise UnknownNameError(f"no value for the variable '{node.id}'", span=node.span) from None

    def visit_Tuple(self, node: n.Tuple) -> tuple[Any, ...]:
        return tuple(_plain_int(self.visit(item)) for item in node.items)

    def visit_UnaryOp(self, node: n.UnaryOp) -> Any:
        value = self.visit(node.operand)
        return self._array(-value if node.op == "-" else value)

    def visit_BinOp(self, node: n.BinOp) -> Any:
        left, right = self.visit(node.left), self.visit(node.right)
        op = node.op
        if op == "**":
            self._check_power(left, right, node)
        if op == "@":
            return self._numpy(node, OPS["matmul"].sympy, self.sp, self.np, left, right)
        result = self._array(self._numpy(node, _ARITHMETIC[op], left, right))
        self._check_constant(result, node)
        if op == "/" and any(value == 0 for value in self._array(right).flat):
            # sympy makes x/0 complex infinity times x, which no evaluator can print or compare.
            raise DomainError(
                "division by zero: the expression is undefined wherever it is evaluated", span=node.right.span,
                hint="divide by something that is not 0, or use where(...) to pick another value there",
            )
        return result

    def visit_Compare(self, node: n.Compare) -> Any:
        left, right = self.visit(node.left), self.visit(node.right)
        relation = {">": "Gt", ">=": "Ge", "<": "Lt", "<=": "Le", "==": "Eq", "!=": "Ne"}[node.op]
        compare = self.np.frompyfunc(getattr(self.sp, relation), 2, 1)
        return self._array(self._numpy(node, compare, left, right))

    # -- calls -------------------------------------------------------------------------------
    def visit_Str(self, node: n.Str) -> str:
        return node.value

    def visit_Special(self, node: n.Special) -> Any:
        return None if node.name == "None" else Ellipsis

    def visit_Slice(self, node: n.Slice) -> slice:
        parts = [None if p is None else _plain_int(self.visit(p)) for p in (node.start, node.stop, node.step)]
        if parts[2] is not None and parts[2] <= 0:
            raise ArgumentError("a slice step must be positive (torch has no negative steps)", span=node.span)
        return slice(*parts)

    def visit_Field(self, node: n.Field) -> Any:
        raise UsageError(
            "a model output's fields (out.logits) have no symbolic meaning", span=node.span,
            hint="--loss reads them from the model's output; check and --symbolic work on tensors",
        )

    def _value(self, kind: str, value: Any) -> Any:
        """A bound argument by its parameter's kind: sizes and indices as Python ints and
        slices, a list of tensors as a list of arrays, the rest translated."""
        if isinstance(value, n.EXPR_TYPES):
            if kind == "tensors":
                return [self.visit(item) for item in value.items]  # type: ignore[union-attr]
            if kind == "index":
                items = value.items if isinstance(value, n.Tuple) else (value,)
                return tuple(self._index_item(item) for item in items)
            if kind == "sizes" and isinstance(value, n.Tuple):
                return tuple(_plain_int(self.visit(item)) for item in value.items)
            if kind == "sizes":
                return _plain_int(self.visit(value))
            return self._option(kind, self.argument(value))
        if kind in ("sizes", "choice", "index"):
            return value  # a default, as the signature gives it
        return self._option(kind, self.argument(value))

    def _index_item(self, item: n.Expr) -> Any:
        if isinstance(item, n.Tuple):
            return [_plain_int(self.visit(v)) for v in item.items]
        value = self.visit(item)
        if isinstance(value, self.np.ndarray) and value.ndim == 0 and getattr(value.item(), "is_Integer", False):
            return int(value.item())
        return value

    def _call_op(self, op: Op, node: n.Call) -> Any:
        bound = bind(op, node)
        values = [self._value(p.kind, bound[p.name]) for p in op.params]
        if op.kind == "split":  # a tuple of arrays, to be subscripted
            return self._numpy(node, op.sympy, self.sp, self.np, *values)
        if op.form == "subscript" and isinstance(values[0], tuple):
            return values[0][_plain_int(values[1][0])]
        if op.name == "pow":
            self._check_power(values[0], values[1], node)
        if op.kind != "elementwise":
            return self._array(self._numpy(node, op.sympy, self.sp, self.np, *values))
        arrays = [
            i for i, p in enumerate(op.params) if p.kind in _TENSOR_KINDS and values[i] is not None
        ]
        # Tensor arguments are replaced element by element below; only 0-d ones are unwrapped here.
        fixed = [v.item() if isinstance(v, self.np.ndarray) and v.ndim == 0 else v for v in values]

        def scalar(*elements: Any) -> Any:
            args = list(fixed)
            for i, element in zip(arrays, elements):
                args[i] = element
            return op.sympy(self.sp, *args)

        elementwise = self.np.frompyfunc(scalar, len(arrays), 1)
        return self._array(self._numpy(node, elementwise, *(values[i] for i in arrays)))

    def _numpy(self, node: n.Expr, fn: Any, *args: Any) -> Any:
        """Call fn (numpy broadcasting over sympy objects); its complaints are the user's."""
        try:
            return fn(*args)
        except GradcliError:
            raise
        except (ValueError, TypeError, IndexError, ZeroDivisionError) as err:
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            name = node.func if isinstance(node, n.Call) else getattr(node, "op", "?")
            raise ShapeError(f"cannot compute '{name}' symbolically: {message}", span=node.span) from None

    def _option(self, kind: str, value: Any) -> Any:
        """dim= and keepdim= as the plain ints and bools numpy's axis/keepdims expect."""
        if value is None or kind not in ("dim", "bool") or isinstance(value, str):
            return value
        if isinstance(value, tuple):
            return tuple(_plain_int(v) for v in value)
        if kind == "bool":
            return bool(value.item() if hasattr(value, "item") else value)
        return _plain_int(value)

    def argument(self, value: Any) -> Any:
        """A bound argument: a node to translate, or a default from the signature."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self._array(symbolic_number(value))
        return super().argument(value)

    def _check_power(self, left: Any, right: Any, node: n.Expr) -> None:
        # sympy computes Integer**Integer exactly: 9**9**9 would never finish. The same
        # bound as the torch builder's, so both interpreters refuse the same constants.
        try:
            pairs = list(self.np.broadcast(left, right))
        except ValueError:
            return  # the shapes do not fit: the operation itself reports it
        for base, exponent in pairs:
            if not (self._plain(base) and self._plain(exponent)):
                if self._plain(exponent) and abs(_to_float(exponent)) > limits.MAX_SYMBOLIC_EXPONENT:
                    # x**N with a huge N: expand/simplify and the like would build N terms.
                    raise LimitError(
                        f"the exponent {_to_float(exponent):g} is beyond "
                        f"±{limits.MAX_SYMBOLIC_EXPONENT:,} for the symbolic formula",
                        span=node.span,
                    )
                continue
            if not limits.check_power(_to_float(base), _to_float(exponent)):
                raise LimitError(
                    f"the constant {base} ** {exponent} is larger than {limits.MAX_CONSTANT:g}",
                    span=node.span,
                )

    def _plain(self, value: Any) -> bool:
        """Arithmetic on numbers, pi and e only: what the torch builder keeps as a Python
        number (exp(2) is a tensor there, and asking sympy about it can take long)."""
        return bool(getattr(value, "is_number", False)) and not value.has(self.sp.Function)

    def _check_constant(self, result: Any, node: n.BinOp) -> None:
        """Refuse constant arithmetic the torch builder refuses: 1/0, (-8)**(1/3), overflow."""
        sp = self.sp
        for value in result.flat:
            if not self._plain(value):
                continue
            if value.has(sp.zoo, sp.nan, sp.oo):
                raise ArgumentError("division by zero in a constant", span=node.span)
            try:
                number = complex(value)
            except (OverflowError, TypeError, ValueError):
                number = complex(math.inf)
            if number.imag != 0:
                raise ArgumentError(
                    "the constant is not a real number (a negative number to a fractional power)",
                    span=node.span,
                )
            if not abs(number.real) <= limits.MAX_CONSTANT:
                raise LimitError(f"the constant is larger than {limits.MAX_CONSTANT:g}", span=node.span)


_ARITHMETIC = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b, "**": lambda a, b: a**b,
}


def _to_float(value: Any) -> float:
    try:
        return float(value)
    except (OverflowError, TypeError):
        return math.inf


def _plain_int(value: Any) -> int:
    return int(value.item() if hasattr(value, "item") else value)
