"""`--var NAME=SPEC` parsed safely into a VarSpec: what the values are, their shape, nothing allocated.

A SPEC is a number (`1.5`), a nested list (`[[1, 2], [3, 4]]`), a bool mask
(`[True, False]`), `none`, or a constructor call from the table in constructors.py:
randn(3,3), rand(4), ones(2,2), zeros(3), full(3, 0.5), arange(0,1,0.25),
linspace(-3,3,101), uniform(0.1,2,50), randint(0, 100, (2, 8)). How the literals were
written is kept (`written`): check-function passes `dim=1` as an int and `[0, 2]` as a long
tensor where forward wants integers, and `none` as None. The text
goes through Python's `ast` with an allow-list (numbers, unary minus, pi, e, lists, tuples of
sizes, those calls); the number of elements is known from the arguments alone, so
`randn(100000,100000)` is refused before any allocation. variables.py makes the tensors.
"""

from __future__ import annotations

import ast
import math
import warnings
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

from .. import limits
from ..errors import GradcliError, LimitError, Span, VariableError
from .constructors import CONSTRUCTORS, Args, Constructor, Values, check_size

#: What a spec is: a plain number, a nested list, a call of a constructor (its row says
#: which), or `none` (Python's None, for a function's optional argument).
SpecKind = Literal["number", "list", "constructor", "none"]
#: The spec text that means None.
NONE = "none"



@dataclass(frozen=True)
class VarSpec:
    """One parsed `--var`: the variable's name, the spec text and what it describes."""

    name: str
    text: str
    kind: SpecKind
    args: tuple[Any, ...]
    shape: tuple[int, ...]
    constructor: Constructor | None = None  # the row, when kind is "constructor"
    #: How a number or list was written: INTEGER when every literal is an int (`1`, `[0, 2]`),
    #: BOOL when every one is True or False; a constructor's values are its row's.
    written: Values = Values.FLOAT

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def integer(self) -> bool:
        """Integer data (token ids, labels): a torch.long leaf that never requires grad."""
        return self.constructor is not None and self.constructor.values is Values.INTEGER

    @property
    def random(self) -> bool:
        """Whether making the tensor draws random numbers (the seed matters)."""
        return self.constructor is not None and self.constructor.random


#: Variable values as given: --var's `NAME=SPEC` texts, or the Python API's {name: SPEC} (a
#: value already parsed, a VarSpec, passes through: what was read once is not read again).
VarInput = Mapping[str, "str | VarSpec"] | Sequence["str | VarSpec"]


def read_vars(var: VarInput) -> dict[str, VarSpec]:
    """The variables' values by name, parsed once, at the boundary: from the command line's
    `NAME=SPEC` texts or the Python API's dict. A name given twice is refused."""
    if isinstance(var, Mapping):
        given = [value if isinstance(value, VarSpec) else parse_spec(_checked_name(str(name)), str(value).strip())
                 for name, value in var.items()]
    else:
        given = [option if isinstance(option, VarSpec) else parse_var(option) for option in var]
    specs: dict[str, VarSpec] = {}
    for spec in given:
        if spec.name in specs:
            raise VariableError(f"--var {spec.name} is given twice")
        specs[spec.name] = spec
    return specs


def parse_vars(options: Sequence[str]) -> dict[str, VarSpec]:
    """Several --var options by name; a name given twice is refused."""
    return read_vars(options)


def parse_var(option: str) -> VarSpec:
    """Parse `NAME=SPEC` (the text of one --var option)."""
    name, sep, text = option.partition("=")
    name, text = name.strip(), text.strip()
    if not sep or not name:
        raise VariableError(
            f"--var '{option}' is not NAME=SPEC", hint="e.g. --var x=1.5 or --var 'x=randn(3,3)'"
        )
    return parse_spec(_checked_name(name), text)


def _checked_name(name: str) -> str:
    if not name.isidentifier() or name.startswith("__") or name in ("pi", "e"):
        raise VariableError(f"--var: '{name}' is not a valid variable name")
    return name


def parse_spec(name: str, text: str) -> VarSpec:
    """Parse a SPEC for variable `name`; nothing is allocated."""
    try:
        return _parse_spec(name, text)
    except GradcliError as err:
        raise err.at(text, f"--var {name}")


def _parse_spec(name: str, text: str) -> VarSpec:
    if len(text) > limits.MAX_SOURCE_CHARS:
        raise LimitError(f"the --var value is longer than {limits.MAX_SOURCE_CHARS:,} characters")
    if not text:
        raise VariableError(f"--var {name}= has no value", hint="e.g. --var x=1.5")
    if "\x00" in text:
        raise VariableError("the --var value contains a null byte")
    try:
        with warnings.catch_warnings():
            # Python warns on stderr about "1or 2" (invalid decimal literal); the refusal says it.
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text, mode="eval").body
    except SyntaxError as err:
        col = max((err.offset or 1) - 1, 0)
        if "too many nested parentheses" in err.msg:
            raise LimitError("the --var value is nested too deeply (200 levels)", span=Span(1, col, 1, col + 1)) from None
        raise VariableError(f"cannot read the value: {err.msg}", span=Span(1, col, 1, col + 1)) from None
    except (RecursionError, MemoryError, ValueError):
        raise LimitError("the --var value is nested too deeply") from None
    if isinstance(tree, ast.Call):
        return _constructor(name, text, tree)
    if isinstance(tree, ast.Name) and tree.id == NONE:
        return VarSpec(name, text, "none", (), ())
    written = _written(tree)
    if isinstance(tree, (ast.List, ast.Tuple)):
        values, shape = _nested(tree, depth=0)
        if math.prod(shape) == 0:
            raise VariableError("an empty list has no values", span=_span(tree))
        return VarSpec(name, text, "list", (values,), shape, written=written)
    return VarSpec(name, text, "number", (_number(tree),), (), written=written)


def _written(tree: ast.AST) -> Values:
    """INTEGER if every literal in `tree` is written as an int, BOOL if every one is True or
    False (a mask), else FLOAT; a mask mixed with numbers is refused."""
    literals = [node for node in ast.walk(tree) if isinstance(node, (ast.Constant, ast.Name))]
    bools = [node for node in literals if isinstance(node, ast.Constant) and isinstance(node.value, bool)]
    if bools and len(bools) < len(literals):
        raise VariableError("a mask is all True and False, without numbers", span=_span(bools[0]))
    if bools:
        return Values.BOOL
    if literals and all(isinstance(node, ast.Constant) and type(node.value) is int for node in literals):
        return Values.INTEGER
    return Values.FLOAT


def _span(node: ast.AST) -> Span:
    return Span(
        getattr(node, "lineno", 1), getattr(node, "col_offset", 0),
        getattr(node, "end_lineno", 1) or 1, getattr(node, "end_col_offset", 1) or 1,
    )


def _number(node: ast.AST, in_list: bool = False) -> float:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _number(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Name) and node.id in ("pi", "e", "inf", "nan"):
        return {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan}[node.id]
    if in_list and isinstance(node, ast.Constant) and type(node.value) is bool:
        return node.value  # type: ignore[return-value]  # a mask's element, kept a bool
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value = node.value
        if isinstance(value, int) and abs(value) > limits.MAX_CONSTANT:
            raise LimitError(f"the number is larger than {limits.MAX_CONSTANT:g}", span=_span(node))
        if isinstance(value, float) and math.isinf(value):  # 1e400: Python reads it as inf, silently
            raise LimitError("the number overflows a float64", span=_span(node), hint="write inf for an infinity")
        return float(value)
    raise VariableError(
        "expected a number, a list of numbers, or a constructor such as randn(3)",
        span=_span(node),
        hint="constructors: " + ", ".join(CONSTRUCTORS),
    )


def _nested(node: ast.AST, depth: int) -> tuple[Any, tuple[int, ...]]:
    if depth > 32:
        raise LimitError("the list is nested more than 32 levels deep", span=_span(node))
    if not isinstance(node, (ast.List, ast.Tuple)):
        return _number(node, in_list=True), ()
    items = [_nested(item, depth + 1) for item in node.elts]
    shapes = {shape for _, shape in items}
    if len(shapes) > 1:
        raise VariableError(
            "the list is ragged: its rows have different lengths", span=_span(node),
            hint="every row of a tensor needs the same length",
        )
    inner = shapes.pop() if shapes else ()
    shape = (len(items), *inner)
    if math.prod(shape) > limits.MAX_ELEMENTS:
        raise LimitError(f"the list has more than {limits.MAX_ELEMENTS:,} elements", span=_span(node))
    return [value for value, _ in items], shape


def _constructor(name: str, text: str, call: ast.Call) -> VarSpec:
    if not isinstance(call.func, ast.Name) or call.func.id not in CONSTRUCTORS:
        called = call.func.id if isinstance(call.func, ast.Name) else ast.unparse(call.func)
        import difflib

        close = difflib.get_close_matches(called, list(CONSTRUCTORS), n=1)
        raise VariableError(
            f"unknown constructor '{called}'",
            span=_span(call.func),
            hint=(f"did you mean '{close[0]}'? " if close else "")
            + "known: " + ", ".join(CONSTRUCTORS),
        )
    row = CONSTRUCTORS[call.func.id]
    if call.keywords:
        raise VariableError(f"{row.name}() takes positional arguments only", span=_span(call.keywords[0].value),
                            hint=row.usage)
    fewest, most = row.arity
    if not fewest <= len(call.args) <= most:
        raise VariableError(f"{row.name}() got {len(call.args)} arguments", span=_span(call), hint=row.usage)
    args: Args = tuple(_argument(a) for a in call.args)
    try:
        shape = row.shape(row.name, args)
        check_size(row, shape)
    except GradcliError as err:
        err.span = err.span or _span(call)
        if err.hint is None and not isinstance(err, LimitError):
            err.hint = row.usage
        raise
    return VarSpec(name, text, "constructor", args, shape, row, written=row.values)


def _argument(node: ast.AST) -> Any:
    """A constructor's argument: a number, or a tuple (or list) of numbers such as a shape."""
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_number(item) for item in node.elts)
    return _number(node)
