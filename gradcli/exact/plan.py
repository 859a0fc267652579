"""What kind of symbolic comparison an expression allows, read off the kinds of its operations.

- elementwise: every operation is elementwise (`x*sigmoid(x)`): one sympy symbol per
  variable stands for every element, and the derivative formula is evaluated on all points.
- reduced: a final `sum()`/`mean()` over an elementwise body (`(x*x).sum()`): the gradient
  of element i is the body's derivative at element i (divided by the count for mean), so it
  is checked exactly like the elementwise body, at any size. Only a final, whole-tensor
  reduction qualifies; one in the middle couples elements.
- exact: anything else (softmax, matmul, a reduction over a dim) on small tensors: one
  symbol per element, the whole Jacobian-vector product compared exactly.
- skipped: the same on tensors too large for one symbol per element; gradcheck still runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..language import nodes as n
from ..language.ops import OPS
from ..language.library import Library, LibraryFunction

#: How `check` compares an expression's derivative (see the module docstring); "skipped" is
#: decided later, with the sizes of the values.
CheckMode = Literal["elementwise", "reduced", "exact", "skipped"]
#: The final whole-tensor reduction of a "reduced" plan.
Reduction = Literal["sum", "mean"]

#: Most variable elements given one symbol each (exact mode).
EXACT_MAX_ELEMENTS = 32


@dataclass
class Plan:
    mode: CheckMode
    program: n.Program  # the program without statements the output does not use
    body: n.Program  # what is differentiated elementwise (the program, or the reduced body)
    reduction: Reduction | None  # for mode "reduced"
    coupling: tuple[str, ...]  # operations that couple elements (softmax, matmul, ...)
    entry: LibraryFunction | None  # the library entry when the program is one call of it
    entry_call: n.Call | None


def make_plan(program: n.Program, library: Library) -> Plan:
    program = prune(program)
    kinds = _Kinds(library)
    scope: dict[str, set[str]] = {}
    for statement in program.statements:
        scope[statement.name] = kinds.visit(statement.value, scope)
    coupling = kinds.visit(program.output, scope)
    entry, call = _single_call(program, library)
    if not coupling:
        return Plan("elementwise", program, program, None, (), entry, call)
    # A final whole-tensor reduction, possibly bound to a name by the last statement.
    output, statements = program.output, program.statements
    if isinstance(output, n.Name) and statements and statements[-1].name == output.id:
        output, statements = statements[-1].value, statements[:-1]
    if _whole_reduction(output):
        inner_scope: dict[str, set[str]] = {}
        for statement in statements:
            inner_scope[statement.name] = kinds.visit(statement.value, inner_scope)
        body_output = output.args[0]  # type: ignore[union-attr]
        if not kinds.visit(body_output, inner_scope):
            body = n.Program(tuple(statements), body_output, program.variables, program.source)
            return Plan("reduced", program, body, output.func, (), None, None)  # type: ignore[union-attr]
    return Plan("exact", program, program, None, tuple(sorted(coupling)), None, None)


def prune(program: n.Program) -> n.Program:
    """The program without the statements its output does not depend on, and with only the
    variables it uses: a dead statement (`h = x @ x; x.exp()`) would otherwise be
    differentiated, and may not even have an elementwise meaning."""
    needed = _names(program.output)
    kept = []
    for statement in reversed(program.statements):
        if statement.name in needed:
            kept.append(statement)
            needed = (needed - {statement.name}) | _names(statement.value)
    used = set().union(_names(program.output), *(_names(s.value) for s in kept))
    variables = tuple(v for v in program.variables if v in used)
    if len(kept) == len(program.statements) and variables == program.variables:
        return program
    return n.Program(tuple(reversed(kept)), program.output, variables, program.source)


def _names(node: n.Expr) -> set[str]:
    return {item.id for item in n.walk(node) if isinstance(item, n.Name)}


def _whole_reduction(node: n.Expr) -> bool:
    return (
        isinstance(node, n.Call)
        and node.func in ("sum", "mean")
        and len(node.args) == 1
        and all(key == "keepdim" for key, _ in node.kwargs)
    )


def _single_call(program: n.Program, library: Library) -> tuple[LibraryFunction | None, n.Call | None]:
    """The library entry when the program is `name(x, constants...)` on its one variable."""
    out = program.output
    if program.statements or not isinstance(out, n.Call) or out.func not in library.functions:
        return None, None
    if len(program.variables) != 1 or not out.args or not isinstance(out.args[0], n.Name):
        return None, None
    rest = [*out.args[1:], *(v for _, v in out.kwargs)]
    if not all(_is_number(v) for v in rest):
        return None, None
    return library.functions[out.func], out


def _is_number(node: n.Expr) -> bool:
    if isinstance(node, n.UnaryOp):
        return _is_number(node.operand)
    return isinstance(node, (n.Num, n.Const))


class _Kinds:
    """The names of the element-coupling operations an expression reaches."""

    def __init__(self, library: Library) -> None:
        self.library = library

    def visit(self, node: n.Expr, scope: dict[str, set[str]]) -> set[str]:
        return getattr(self, f"visit_{type(node).__name__}")(node, scope)

    def visit_Num(self, node: n.Num, scope: dict[str, set[str]]) -> set[str]:
        return set()

    def visit_Const(self, node: n.Const, scope: dict[str, set[str]]) -> set[str]:
        return set()

    def visit_Name(self, node: n.Name, scope: dict[str, set[str]]) -> set[str]:
        return set(scope.get(node.id, ()))

    def visit_Tuple(self, node: n.Tuple, scope: dict[str, set[str]]) -> set[str]:
        return set()

    def visit_UnaryOp(self, node: n.UnaryOp, scope: dict[str, set[str]]) -> set[str]:
        return self.visit(node.operand, scope)

    def visit_BinOp(self, node: n.BinOp, scope: dict[str, set[str]]) -> set[str]:
        found = self.visit(node.left, scope) | self.visit(node.right, scope)
        return found | {"matmul"} if node.op == "@" else found

    def visit_Compare(self, node: n.Compare, scope: dict[str, set[str]]) -> set[str]:
        return self.visit(node.left, scope) | self.visit(node.right, scope)

    def visit_Call(self, node: n.Call, scope: dict[str, set[str]]) -> set[str]:
        found: set[str] = set()
        for arg in (*node.args, *(v for _, v in node.kwargs)):
            found |= self.visit(arg, scope)
        op = OPS.get(node.func)
        if op is not None:
            return found | ({op.name} if op.kind != "elementwise" else set())
        body = self.library.functions[node.func].body
        inner: dict[str, set[str]] = {}
        for statement in body.statements:
            inner[statement.name] = self.visit(statement.value, inner)
        return found | self.visit(body.output, inner)
