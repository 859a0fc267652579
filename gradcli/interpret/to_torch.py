"""Interpret the AST with torch: build exactly the graph the equivalent PyTorch code builds.

Operators go through Python's own `operator` functions and calls through the torch function
or Tensor method the user wrote, with the arguments as written, so `x * 2` builds the same
`MulBackward0` (with a `None` input) as it would in a script. Plain numbers stay Python
numbers except where torch needs a tensor (`exp(2)`). Before an operation that can grow
memory (a broadcast, a matmul) the result size is checked against `limits.MAX_ELEMENTS`.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .. import limits
from .._deep import run_deep
from .._quiet_gc import paused_gc
from ..errors import ArgumentError, GradcliError, LimitError, ShapeError, Span, UnknownNameError
from ..language import nodes as n
from ..language.ops import Op, resolve_torch
from . import fields
from .sizes import check_growth as _check_growth
from .sizes import check_size as _check_size
from .sizes import integer as _integer
from .interpreter import Interpreter

if TYPE_CHECKING:
    import torch

    from ..language.library import Library

_BINARY = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "**": operator.pow, "@": operator.matmul,
}
_COMPARE = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
            "!=": operator.ne}
_CONSTANTS = {"pi": math.pi, "e": math.e}
#: Where a graph node came from in the source; the trace reads it from `grad_fn.metadata`.
SPAN_KEY = "gradcli_span"


@dataclass
class Built:
    """The result of building a program: its output and every name bound on the way."""

    output: Any  # a Tensor, or a Python number when nothing depends on a variable
    leaves: dict[str, "torch.Tensor"]
    bindings: list[tuple[str, Any]]  # (name, value) for each assignment, in order


#: Called before each operation is applied: (its name as written, e.g. "maximum" or "<",
#: its evaluated positional arguments, its keyword arguments).
Observer = Callable[[str, tuple[Any, ...], dict[str, Any]], None]
#: Called after each operation is applied: the same three, then its result.
Applied = Callable[[str, tuple[Any, ...], dict[str, Any], Any], None]


def build(
    program: n.Program,
    leaves: Mapping[str, "torch.Tensor"],
    *,
    library: "Library | None" = None,
    observe: Observer | None = None,
    applied: Applied | None = None,
    structured: Mapping[str, Any] | None = None,
) -> Built:
    """Evaluate `program` with torch, the variables bound to `leaves` (tensors).

    `observe`, when given, sees every operation's arguments before it is applied (the
    checker measures from them how close points are to a branch boundary or a kink);
    `applied` sees each operation with its result (trace --symbolic pairs torch's nodes with
    the formulas of the operations that made them). `structured` binds names to a model's
    output as it was returned (a tuple, a dict, a ModelOutput): `out.logits`, `out[0]` read
    it, while the plain name means the tensor `leaves` binds (a tuple's first item)."""
    if library is None:
        from ..language.library import default_library

        library = default_library()
    structured = dict(structured or {})
    missing = [v for v in program.variables if v not in leaves and v not in structured]
    if missing:
        raise UnknownNameError(f"no value for the variable '{missing[0]}'", hint=f"give one with --var {missing[0]}=...")
    builder = _TorchBuilder(dict(leaves), library, observe, applied)
    builder.structured = structured
    try:
        with paused_gc():  # a long program allocates many objects and no cycles
            return run_deep(builder.program, program)
    except GradcliError as err:
        raise err.at(program.source)


class _TorchBuilder(Interpreter):
    what = "torch builder"

    def __init__(
        self, env: dict[str, Any], library: "Library", observe: Observer | None = None,
        applied: Applied | None = None,
    ) -> None:
        import torch

        self.torch = torch
        self.observe = observe
        self.applied = applied
        self.leaves = dict(env)
        self.env = env
        self.library = library
        sample = next((v for v in env.values() if isinstance(v, torch.Tensor)), None)
        floating = next((v for v in env.values() if isinstance(v, torch.Tensor) and v.is_floating_point()), None)
        # The program's dtype plays torch's default dtype: the one a number becomes where a
        # floating tensor is wanted. Integer data (labels) never sets it.
        self.dtype = floating.dtype if floating is not None else torch.get_default_dtype()
        self.device = sample.device if sample is not None else torch.device("cpu")
        self.bindings: list[tuple[str, Any]] = []
        self.structured: dict[str, Any] = {}
        self.bound: set[str] = set()

    def program(self, program: n.Program) -> Built:
        for statement in program.statements:
            value = self.visit(statement.value)
            self.env[statement.name] = value
            self.bound.add(statement.name)
            self.bindings.append((statement.name, value))
        output = self.visit(program.output)
        return Built(output, self.leaves, self.bindings)

    def visit_Num(self, node: n.Num) -> Any:
        return node.value

    def visit_Const(self, node: n.Const) -> float:
        return _CONSTANTS[node.name]

    def visit_Name(self, node: n.Name) -> Any:
        try:
            return self.env[node.id]
        except KeyError:
            if node.id in self.structured:
                whole = self.structured[node.id]
                raise ShapeError(
                    f"'{node.id}' is {fields.describe(whole)}, not a tensor: pick one part", span=node.span,
                    hint=f"e.g. {node.id}.{fields.names_in(whole)[0]}" if fields.names_in(whole) else f"e.g. {node.id}[0]",
                ) from None
            raise UnknownNameError(
                f"no value for the variable '{node.id}'", span=node.span,
                hint=f"give one with --var {node.id}=...",
            ) from None

    def visit_Tuple(self, node: n.Tuple) -> tuple[Any, ...]:
        return tuple(self.visit(item) for item in node.items)

    def visit_Str(self, node: n.Str) -> str:
        return node.value

    def visit_Special(self, node: n.Special) -> Any:
        return None if node.name == "None" else Ellipsis

    def visit_Slice(self, node: n.Slice) -> slice:
        parts = [None if p is None else _integer(self.visit(p), p.span, "a slice bound") for p in (node.start, node.stop, node.step)]
        if parts[2] is not None and parts[2] <= 0:
            raise ArgumentError("a slice step must be positive (torch has no negative steps: use flip)", span=node.step.span)  # type: ignore[union-attr]
        return slice(*parts)

    def visit_Field(self, node: n.Field) -> Any:
        value = self._whole(node.value)
        from ..language.source import to_source

        return fields.field(value, node.name, key=node.key, span=node.span, written=to_source(node))

    def _whole(self, node: n.Expr) -> Any:
        """A value as the model returned it: `out` is the structured output, for out.logits."""
        if isinstance(node, n.Name) and node.id in self.structured and node.id not in self.bound:
            return self.structured[node.id]
        return self.visit(node)

    def visit_UnaryOp(self, node: n.UnaryOp) -> Any:
        value = self.visit(node.operand)
        return self._apply(operator.neg if node.op == "-" else operator.pos, (value,), node.span, node.op)

    def visit_BinOp(self, node: n.BinOp) -> Any:
        left, right = self.visit(node.left), self.visit(node.right)
        if not isinstance(left, self.torch.Tensor) and not isinstance(right, self.torch.Tensor):
            return _constant(node.op, left, right, node.span)
        if node.op == "@":
            self._check_matmul(left, right, node.span)
        else:
            self._check_broadcast((left, right), node.span)
        operands = [v for v in (left, right) if isinstance(v, self.torch.Tensor)]
        # A float beside integers, or any number in a true division of integers: the result is
        # torch's default dtype, which in a program is the program's (y / 2 is float64 there).
        if self._float_beside_integers(float(left) if node.op == "/" and _is_number(left) else left, operands):
            left = self.torch.tensor(left, dtype=self.dtype, device=self.device)
        if self._float_beside_integers(float(right) if node.op == "/" and _is_number(right) else right, operands):
            right = self.torch.tensor(right, dtype=self.dtype, device=self.device)
        return self._apply(_BINARY[node.op], (left, right), node.span, node.op)

    def visit_Compare(self, node: n.Compare) -> Any:
        left, right = self.visit(node.left), self.visit(node.right)
        if not isinstance(left, self.torch.Tensor) and not isinstance(right, self.torch.Tensor):
            return self.torch.tensor(_COMPARE[node.op](left, right), device=self.device)
        self._check_broadcast((left, right), node.span)
        return self._apply(_COMPARE[node.op], (left, right), node.span, node.op)

    # -- calls -------------------------------------------------------------------------------
    def _call_op(self, op: Op, node: n.Call) -> Any:
        tensor = self.torch.Tensor
        if op.form == "subscript":
            return self._subscript(node)
        # The parser bound the call to op.params: positional arguments are the first params.
        # A number for a tensor parameter waits until every operand is known: torch's type
        # promotion decides its dtype (maximum(y, 3) stays int64 for an int64 y).
        args = [self._argument(p.kind, self.visit(a), a.span, later=True) for p, a in zip(op.params, node.args)]
        kwargs: dict[str, Any] = {}
        # Keywords are rare (a 20,000-op chain has none): their kinds are looked up only then.
        kinds = {p.name: p.kind for p in op.params} if node.kwargs else {}
        if node.kwargs:
            kwargs = {key: self._argument(kinds[key], self.visit(value), value.span, later=True)
                      for key, value in node.kwargs}
        operands = [v for p, v in zip(op.params, args) if isinstance(v, tensor) and p.kind in _OPERAND_KINDS]
        if kwargs:
            operands += [v for k, v in kwargs.items() if isinstance(v, tensor) and kinds[k] in _OPERAND_KINDS]
        made = []  # numbers made tensors here: operands too from now on (logsumexp(0.5, dim=0)'s
        # dim must not be taken for a lone number below)
        for index, (p, value) in enumerate(zip(op.params, args)):
            if isinstance(value, tensor):
                continue  # neither a number for a tensor nor a float beside integers
            if (p.kind == "tensor" and _is_number(value)) or (p.kind == "scalar" and self._float_beside_integers(value, operands)):
                args[index] = self._number(value, operands)
                made.append(args[index])
        for key, value in kwargs.items():
            if (kinds[key] == "tensor" and _is_number(value)) or (kinds[key] == "scalar" and self._float_beside_integers(value, operands)):
                kwargs[key] = self._number(value, operands)
                made.append(kwargs[key])
        operands += made
        if op.kind in _MOVING:
            if op.kind != "constructor" and not isinstance(args[0], tensor) and op.params[0].kind != "tensors":
                args[0] = self._number(args[0], operands) if _is_number(args[0]) else self._argument("tensor", args[0])
            _check_growth(op.name, args, kwargs, node.span)
            fn = _attribute(op.name) if op.form == "attribute" else (
                getattr(type(args[0]), op.name) if node.method else resolve_torch(op.torch))
            return self._apply(fn, tuple(args), node.span, op.name, kwargs)
        if node.method and not isinstance(args[0], tensor):
            args[0] = self._number(args[0], operands)  # (2).pow(x): a method is a tensor's
            operands.append(args[0])
        tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, tensor)]
        if not operands:
            # Plain numbers only (pow(2, 3), where(c, 0.1, 0.2)): torch refuses them or computes
            # in float32, so the first becomes a tensor of the program's dtype. Beside an integer
            # tensor a number stays a Python number, which torch's promotion ranks below any
            # tensor: where(c, y, -100) stays int64, as torch.where does.
            numbers = [k for k, v in (*enumerate(args), *kwargs.items()) if type(v) in (int, float)]
            if numbers:
                target = args if isinstance(numbers[0], int) else kwargs
                target[numbers[0]] = self._argument("tensor", target[numbers[0]])  # type: ignore[index]
                tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, tensor)]
        if op.kind == "matmul" and len(args) + len(kwargs) == 2:
            self._check_matmul(*args, *kwargs.values(), node.span)
        elif len(tensors) > 1 and op.kind != "loss":  # scores [N, C] and labels [N] do not broadcast
            self._check_broadcast(tensors, node.span)
        # A method is called through its class, receiver first: x.pow(2) is Tensor.pow(x, 2).
        fn = getattr(type(args[0]), op.name) if node.method else resolve_torch(op.torch)
        return self._apply(fn, tuple(args), node.span, op.name, kwargs)

    def _float_beside_integers(self, value: Any, operands: list[Any]) -> bool:
        """A float among integer tensors only: torch would make the result its default dtype,
        which in a program is the program's dtype (y + 1.5 is float64 in a float64 program)."""
        return (type(value) is float and bool(operands)
                and not any(t.is_floating_point() or t.is_complex() for t in operands))

    def _number(self, value: Any, operands: list[Any]) -> Any:
        """A Python number as the tensor torch's promotion would make of it beside `operands`
        (the call's tensor operands): with a floating operand, or a float beside integers, the
        program's dtype (torch's default dtype); an int beside integer tensors, their integer
        dtype (a bool tensor's: int64); alone, the program's dtype (torch takes no number there)."""
        torch = self.torch
        dtype = self.dtype
        if type(value) is int and operands and not any(t.is_floating_point() or t.is_complex() for t in operands):
            integers = [t.dtype for t in operands if t.dtype != torch.bool]
            dtype = functools.reduce(torch.promote_types, integers) if integers else torch.int64
        return torch.tensor(value, dtype=dtype, device=self.device)

    def _argument(self, kind: str, value: Any, span: Span | None = None, *, later: bool = False) -> Any:
        if kind in _TENSOR_KINDS and isinstance(value, self.torch.Tensor):
            return value  # the common case, which every test below lets through
        if kind == "tensor" and _is_number(value):
            return value if later else self.torch.tensor(value, dtype=self.dtype, device=self.device)
        if kind == "sizes" and value is not None:
            if isinstance(value, tuple):
                return tuple(_integer(v, span, "a size") for v in value)
            return _integer(value, span, "a size")
        if kind == "tensors":
            return [self._argument("tensor", v) for v in value]
        if kind in ("tensor", "scalar", "cond", "mask") and fields.is_structure(value):
            raise ShapeError(f"{fields.describe(value)} is not a tensor: pick one part", span=span,
                             hint="out[0], out.logits or out[\"logits\"]")
        return value

    def _subscript(self, node: n.Call) -> Any:
        value = self._whole(node.args[0])
        items = node.args[1].items if isinstance(node.args[1], n.Tuple) else (node.args[1],)
        index = tuple(self._index_item(item) for item in items)
        if fields.is_structure(value):
            return fields.item(value, index, node.span)
        if not isinstance(value, self.torch.Tensor):
            raise ShapeError("only a tensor or a model's output can be subscripted", span=node.span)
        return self._apply(_getitem, (value, index), node.span, "getitem")

    def _index_item(self, item: n.Expr) -> Any:
        if isinstance(item, n.Tuple):  # x[[0, 2]]: an integer list
            values = [_integer(self.visit(v), v.span, "an index") for v in item.items]
            return self.torch.tensor(values, dtype=self.torch.long, device=self.device)
        value = self.visit(item)
        if isinstance(value, float):
            raise ArgumentError(f"an index must be an integer, not {value!r}", span=item.span)
        return value

    # -- applying torch ----------------------------------------------------------------------
    def _apply(
        self, fn: Any, args: tuple[Any, ...], span: Span | None, name: str, kwargs: dict[str, Any] | None = None
    ) -> Any:
        if self.observe is not None:
            self.observe(name, args, kwargs or {})
        for a in args:  # a loop, not any(generator): this runs once per operation
            if type(a) is int and not _INT64_MIN <= a <= _INT64_MAX:
                # Constants fold exactly as Python ints; torch takes an int only within int64, so a
                # larger one (2**70, still under MAX_CONSTANT) enters torch as the float it is.
                args = tuple(float(a) if type(a) is int else a for a in args)
                break
        try:
            result = fn(*args, **(kwargs or {}))
        except (RuntimeError, IndexError, TypeError, ValueError, OverflowError) as err:
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ShapeError(f"torch refused '{name}': {message}", span=span, hint=_hint(name, args)) from None
        grad_fn = getattr(result, "grad_fn", None)
        if grad_fn is not None and span is not None and SPAN_KEY not in grad_fn.metadata:
            grad_fn.metadata[SPAN_KEY] = span
        if self.applied is not None:
            self.applied(name, args, kwargs or {}, result)
        return result

    def _shape(self, value: Any) -> tuple[int, ...]:
        return tuple(value.shape) if isinstance(value, self.torch.Tensor) else ()

    def _check_broadcast(self, values: Any, span: Span | None) -> None:
        shapes = [self._shape(v) for v in values]
        try:
            shape = broadcast_shape(shapes)
        except ValueError:
            described = " and ".join(str(list(s)) for s in shapes)
            raise ShapeError(
                f"shapes {described} cannot be broadcast together", span=span,
                hint="trailing dimensions must be equal or 1",
            ) from None
        _check_size(shape, span)

    def _check_matmul(self, left: Any, right: Any, span: Span | None) -> None:
        a, b = self._shape(left), self._shape(right)
        try:
            shape = self._matmul_shape(a, b)
        except (RuntimeError, ValueError) as err:
            message = str(err).strip().splitlines()[0]
            raise ShapeError(f"cannot matmul shapes {list(a)} and {list(b)}: {message}", span=span) from None
        _check_size(shape, span)

    def _matmul_shape(self, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        """torch.matmul's result shape, by its documented rules. (Asking torch with meta
        tensors instead costs ~2 s the first time: it loads the meta kernels.)"""
        if not a or not b:
            raise ValueError(
                f"both arguments to matmul need to be at least 1D, but they are {len(a)}D and {len(b)}D"
            )
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise ValueError(f"the inner sizes differ ({a2[-1]} and {b2[-2]})")
        batch = tuple(self.torch.broadcast_shapes(a2[:-2], b2[:-2]))
        return batch + a2[-2:-1] * (len(a) > 1) + b2[-1:] * (len(b) > 1)


def broadcast_shape(shapes: Any) -> tuple[int, ...]:
    """The shape `torch.broadcast_shapes` gives (ValueError where it raises), in plain Python:
    torch's own imports sympy on first use (~0.5 s), which `gradcli trace` must not pay."""
    ndim = max((len(s) for s in shapes), default=0)
    result = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape, start=ndim - len(shape)):
            if size != result[i]:
                if result[i] != 1 and size != 1:
                    raise ValueError(f"shapes cannot be broadcast: {[list(s) for s in shapes]}")
                result[i] = size if result[i] == 1 else result[i]
    return tuple(result)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: Kinds of rows that move or make elements: their arguments are passed as written, never
#: turned into tensors of the program's dtype (arange(4) is the integers, x[1] an int).
_MOVING = ("shape", "split", "constructor")


def _hint(name: str, args: tuple[Any, ...]) -> str | None:
    """What would be right, where a refusal has a usual cause."""
    if name in ("cross_entropy", "nll_loss") and args and getattr(args[0], "ndim", 0) >= 3:
        # torch reads dim 1 of a 3-d input as the classes: a language model's [batch, time, vocab]
        # logits must be rows first.
        return "scores [batch, time, classes] are rows first: cross_entropy(out.flatten(0, 1), y.flatten())"
    if name in ("getitem", "gather", "index_select") and any(
        getattr(a, "is_floating_point", lambda: False)() for a in _flat(args[1:])
    ):
        # --var i=[1, 0] is a float leaf, as every written list is.
        return "an index is integer data: --var 'i=randint(0, 5, (3,))', or arange(n) in the expression"
    return None


#: Parameter kinds whose tensors are a call's operands (for type promotion).
_OPERAND_KINDS = frozenset({"tensor", "scalar"})
#: Parameter kinds that take a tensor as it is (`sizes` and `tensors` read theirs).
_TENSOR_KINDS = frozenset({"tensor", "scalar", "cond", "mask"})


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _flat(values: Any) -> list[Any]:
    out: list[Any] = []
    for value in values:
        out.extend(_flat(value) if isinstance(value, (tuple, list)) else [value])
    return out


def _getitem(value: Any, index: tuple[Any, ...]) -> Any:
    return value[index]


def _attribute(name: str) -> Callable[[Any], Any]:
    return operator.attrgetter(name)




def _constant(op: str, left: Any, right: Any, span: Span | None) -> Any:
    """Arithmetic on two plain numbers, as Python does it, but never unbounded."""
    if not all(isinstance(v, (int, float)) for v in (left, right)):
        raise ArgumentError(f"'{op}' needs numbers or tensors", span=span)
    if op == "**" and not limits.check_power(left, right):
        raise LimitError(
            f"the constant {left!r} ** {right!r} is larger than {limits.MAX_CONSTANT:g}", span=span
        )
    if op == "@":
        raise ShapeError("'@' needs tensors, not plain numbers", span=span)
    try:
        result = _BINARY[op](left, right)
    except ZeroDivisionError:
        raise ArgumentError("division by zero in a constant", span=span) from None
    except OverflowError:
        raise LimitError(f"the constant overflows (limit {limits.MAX_CONSTANT:g})", span=span) from None
    if isinstance(result, complex):
        raise ArgumentError("the constant is not a real number (a negative number to a fractional power)", span=span)
    if isinstance(result, float) and not math.isfinite(result):
        raise LimitError(f"the constant overflows a float64 (limit {limits.MAX_CONSTANT:g})", span=span)
    if abs(result) > limits.MAX_CONSTANT:
        raise LimitError(f"the constant is larger than {limits.MAX_CONSTANT:g}", span=span)
    return result
