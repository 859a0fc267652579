"""THE table of rewrites: numerically safer forms of expressions whose gradient goes wrong.

Each `Rule` is AST to AST: `apply(node)` returns the rewritten node where the rule matches
that node, else None. A row names what it matches (`before` -> `after`), its precondition
(what must hold for the two to be the same function), the trade-off when there is one, and
the reports it answers. A rule is only ever a *proposal*: verify/expression/fixes.py builds the rewritten
expression and runs the same check on the same points; a rewrite that does not fix the check
is never shown as a fix. Adding a rule is one row here and one test (tests/language/test_rewrites.py).

Nothing here imports torch or sympy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

from . import nodes as n
from .ops import OPS


@dataclass(frozen=True)
class Rule:
    """One rewrite: where it applies, what it gives, and why that is the same function."""

    name: str
    before: str
    after: str
    precondition: str
    apply: Callable[[n.Expr], n.Expr | None]
    tradeoff: str | None = None


# -- matching helpers -----------------------------------------------------------------------


def _call(node: n.Expr, *names: str) -> n.Call | None:
    """`node` as a call of one of `names` (function or method form), else None."""
    return node if isinstance(node, n.Call) and node.func in names else None


def _arg(call: n.Call, index: int, name: str) -> n.Expr | None:
    """The argument bound to parameter `name` (position `index`), or None."""
    if len(call.args) > index:
        return call.args[index]
    return dict(call.kwargs).get(name)


def _number(node: n.Expr) -> float | None:
    if isinstance(node, n.Num) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, n.UnaryOp) and node.op == "-" and isinstance(node.operand, n.Num):
        return -float(node.operand.value)
    return None


def _is_one(node: n.Expr) -> bool:
    return _number(node) == 1.0


def _plus_one(node: n.Expr) -> n.Expr | None:
    """`a` when node is `1 + a` or `a + 1`."""
    if isinstance(node, n.BinOp) and node.op == "+":
        if _is_one(node.left):
            return node.right
        if _is_one(node.right):
            return node.left
    return None


def _exp_of(node: n.Expr) -> n.Expr | None:
    call = _call(node, "exp")
    return call.args[0] if call else None


def _square_of(node: n.Expr) -> n.Expr | None:
    """`a` when node is `a**2`, `a*a`, `square(a)` or `a.pow(2)`."""
    if isinstance(node, n.BinOp) and node.op == "**" and _number(node.right) == 2.0:
        return node.left
    if isinstance(node, n.BinOp) and node.op == "*" and node.left == node.right:
        return node.left
    call = _call(node, "square", "pow")
    if call and (call.func == "square" or _number(_arg(call, 1, "exponent") or n.Num(0)) == 2.0):
        return call.args[0]
    return None


def _fn(name: str, *args: n.Expr, **kwargs: n.Expr) -> n.Call:
    return n.Call(name, tuple(args), tuple(kwargs.items()))


def _where(cond: n.Expr, a: n.Expr, b: n.Expr) -> n.Call:
    return _fn("where", cond, a, b)


# -- the rules ------------------------------------------------------------------------------


def _softplus(node: n.Expr) -> n.Expr | None:
    call = _call(node, "log")
    inner = _plus_one(call.args[0]) if call else None
    a = _exp_of(inner) if inner is not None else None
    return _fn("softplus", a) if a is not None else None


def _logsigmoid(node: n.Expr) -> n.Expr | None:
    call = _call(node, "log")
    inner = _call(call.args[0], "sigmoid") if call else None
    return _fn("logsigmoid", inner.args[0]) if inner else None


def _sigmoid(node: n.Expr) -> n.Expr | None:
    if not (isinstance(node, n.BinOp) and node.op == "/"):
        return None
    a = _exp_of(node.left)
    if a is not None and _exp_of(_plus_one(node.right) or n.Num(0)) == a:
        return _fn("sigmoid", a)  # exp(a) / (1 + exp(a))
    neg = _exp_of(_plus_one(node.right) or n.Num(0)) if _is_one(node.left) else None
    if isinstance(neg, n.UnaryOp) and neg.op == "-":
        return _fn("sigmoid", neg.operand)  # 1 / (1 + exp(-a))
    return None


def _tanh(node: n.Expr) -> n.Expr | None:
    if not (isinstance(node, n.BinOp) and node.op == "/"):
        return None
    top, bottom = node.left, node.right
    if not (isinstance(top, n.BinOp) and top.op == "-" and isinstance(bottom, n.BinOp) and bottom.op == "+"):
        return None
    a, minus_a = _exp_of(top.left), _exp_of(top.right)
    if a is None or minus_a != n.UnaryOp("-", a):
        return None
    if {_exp_of(bottom.left), _exp_of(bottom.right)} != {a, minus_a}:
        return None
    return _fn("tanh", a)


def _logsumexp(node: n.Expr) -> n.Expr | None:
    call = _call(node, "log")
    total = _call(call.args[0], "sum") if call else None
    a = _exp_of(total.args[0]) if total else None
    if a is None or total is None:
        return None
    dim = _arg(total, 1, "dim")
    keepdim = _arg(total, 2, "keepdim")
    kwargs = {"dim": dim if dim is not None else n.Num(0)}
    if keepdim is not None:
        kwargs["keepdim"] = keepdim
    return _fn("logsumexp", a, **kwargs)


def _log_softmax(node: n.Expr) -> n.Expr | None:
    call = _call(node, "log")
    inner = _call(call.args[0], "softmax") if call else None
    if inner is None:
        return None
    return _fn("log_softmax", inner.args[0], dim=_arg(inner, 1, "dim") or n.Num(0))


def _softmax(node: n.Expr) -> n.Expr | None:
    if not (isinstance(node, n.BinOp) and node.op == "/"):
        return None
    a = _exp_of(node.left)
    total = _call(node.right, "sum")
    if a is None or total is None or _exp_of(total.args[0]) != a:
        return None
    dim = _arg(total, 1, "dim")
    return _fn("softmax", a, dim=dim if dim is not None else n.Num(0))


def _log1p(node: n.Expr) -> n.Expr | None:
    call = _call(node, "log")
    a = _plus_one(call.args[0]) if call else None
    return _fn("log1p", a) if a is not None and _exp_of(a) is None else None


def _expm1(node: n.Expr) -> n.Expr | None:
    if isinstance(node, n.BinOp) and node.op == "-" and _is_one(node.right):
        a = _exp_of(node.left)
        return _fn("expm1", a) if a is not None else None
    return None


def _log_exp(node: n.Expr) -> n.Expr | None:
    call = _call(node, "log")
    return _exp_of(call.args[0]) if call else None


def _asinh(node: n.Expr) -> n.Expr | None:
    call = _call(node, "log")
    inner = call.args[0] if call else None
    if not (isinstance(inner, n.BinOp) and inner.op == "+"):
        return None
    for a, root in ((inner.left, inner.right), (inner.right, inner.left)):
        sqrt = _call(root, "sqrt")
        under = _plus_one(sqrt.args[0]) if sqrt else None
        if under is not None and _square_of(under) == a:
            return _fn("asinh", a)
    return None


def _sqrt_power(node: n.Expr) -> n.Expr | None:
    if isinstance(node, n.BinOp) and node.op == "**":
        sqrt, p = _call(node.left, "sqrt"), _number(node.right)
        if sqrt and p is not None and p > 1:
            return n.BinOp("**", sqrt.args[0], n.Num(p / 2))
    if isinstance(node, n.BinOp) and node.op == "*":
        for a, other in ((node.left, node.right), (node.right, node.left)):
            sqrt = _call(other, "sqrt")
            if sqrt and sqrt.args[0] == a:
                return n.BinOp("**", a, n.Num(1.5))
    return None


def _abs(node: n.Expr) -> n.Expr | None:
    call = _call(node, "sqrt")
    a = _square_of(call.args[0]) if call else None
    return _fn("abs", a) if a is not None else None


def _sum_of_squares(node: n.Expr) -> bool:
    total = _call(node, "sum")
    if total is not None:
        return _square_of(total.args[0]) is not None
    if isinstance(node, n.BinOp) and node.op == "+":
        return all(_square_of(s) is not None or _sum_of_squares(s) for s in (node.left, node.right))
    return False


def _safe_norm(node: n.Expr) -> n.Expr | None:
    call = _call(node, "sqrt")
    if call is None or not _sum_of_squares(call.args[0]):
        return None
    s = call.args[0]
    positive = n.Compare(">", s, n.Num(0))
    return _where(positive, _fn("sqrt", _where(positive, s, n.Num(1))), n.Num(0))


#: Operations whose argument, outside the branch `where` selects, can make a nan or inf that
#: leaks into the gradient: those with a restricted domain or a kink at 0 (from the op table)
#: and those that overflow.
_OVERFLOWING = {"exp", "expm1", "cosh", "sinh"}


def _safe_value(op_name: str) -> float:
    """A value inside the operation's domain, where its derivative is finite."""
    if op_name in _OVERFLOWING:
        return 0.0
    low, high = OPS[op_name].domain
    if math.isfinite(low) and math.isfinite(high):
        return (low + high) / 2
    if math.isfinite(low):
        return low + 1.0
    if math.isfinite(high):
        return high - 1.0
    return 1.0  # a kink at 0 (reciprocal)


def _guarded(op_name: str) -> bool:
    op = OPS.get(op_name)
    return op is not None and op.kind == "elementwise" and (
        op_name in _OVERFLOWING or op.domain != (-math.inf, math.inf) or 0.0 in op.kinks
    )


def _guard_branch(branch: n.Expr, cond: n.Expr) -> n.Expr:
    """`branch` with the argument of every guarded call (and every divisor) replaced by
    where(cond, argument, safe value): where cond does not hold, the branch is not selected,
    and its operations then see a value where they and their derivatives are finite."""

    def guard(node: n.Expr) -> n.Expr:
        if isinstance(node, n.Call) and node.func != "where":
            args = tuple(guard(a) for a in node.args)
            already = isinstance(args[0], n.Call) and args[0].func == "where" if args else False
            if _guarded(node.func) and args and not isinstance(args[0], n.Num) and not already:
                args = (_where(cond, args[0], n.Num(_safe_value(node.func))), *args[1:])
            return n.Call(node.func, args, node.kwargs, node.method)
        if isinstance(node, n.BinOp):
            left, right = guard(node.left), guard(node.right)
            if node.op == "/" and not isinstance(right, n.Num):
                right = _where(cond, right, n.Num(1.0))
            if node.op == "**" and _number(right) is not None and not float(_number(right) or 0).is_integer():
                left = _where(cond, left, n.Num(1.0))
            return n.BinOp(node.op, left, right)
        if isinstance(node, n.UnaryOp):
            return n.UnaryOp(node.op, guard(node.operand))
        return node

    return guard(branch)


def _negate(cond: n.Expr) -> n.Expr:
    flipped = {">": "<=", ">=": "<", "<": ">=", "<=": ">", "==": "!=", "!=": "=="}
    assert isinstance(cond, n.Compare)
    return n.Compare(flipped[cond.op], cond.left, cond.right)


def _double_where(node: n.Expr) -> n.Expr | None:
    call = _call(node, "where")
    if call is None or len(call.args) != 3 or not isinstance(call.args[0], n.Compare):
        return None
    cond, a, b = call.args
    new_a, new_b = _guard_branch(a, cond), _guard_branch(b, _negate(cond))
    if new_a == a and new_b == b:
        return None
    return _where(cond, new_a, new_b)


RULES: tuple[Rule, ...] = (
    Rule("softplus", "log(1 + exp(a))", "softplus(a)",
         "always (torch's softplus is exactly log(1 + exp(a)) below a = 20 and a, within 2e-9, above)",
         _softplus),
    Rule("logsigmoid", "log(sigmoid(a))", "logsigmoid(a)", "always", _logsigmoid),
    Rule("sigmoid", "exp(a) / (1 + exp(a))", "sigmoid(a)", "always (also 1 / (1 + exp(-a)))", _sigmoid),
    Rule("tanh", "(exp(a) - exp(-a)) / (exp(a) + exp(-a))", "tanh(a)", "always", _tanh),
    Rule("logsumexp", "log(sum(exp(a), dim))", "logsumexp(a, dim)",
         "the same dim (without one, a must be one-dimensional: dim=0)", _logsumexp),
    Rule("softmax", "exp(a) / sum(exp(a), dim, keepdim=True)", "softmax(a, dim)", "the same dim", _softmax),
    Rule("log_softmax", "log(softmax(a, dim))", "log_softmax(a, dim)", "always", _log_softmax),
    Rule("log1p", "log(1 + a)", "log1p(a)", "always", _log1p),
    Rule("expm1", "exp(a) - 1", "expm1(a)", "always", _expm1),
    Rule("log_exp", "log(exp(a))", "a", "a is real", _log_exp),
    Rule("asinh", "log(a + sqrt(a**2 + 1))", "asinh(a)", "always", _asinh),
    Rule("sqrt_power", "sqrt(a)**p, a*sqrt(a)", "a**(p/2), a**1.5", "a >= 0 (where sqrt is defined)",
         _sqrt_power),
    Rule("abs", "sqrt(a**2)", "abs(a)", "always (autograd then gives 0, a subgradient, at a = 0)", _abs),
    Rule("double_where", "where(c, f(a), b)", "where(c, f(where(c, a, safe)), b)",
         "always: the branch's value is unchanged where c selects it; elsewhere it was discarded",
         _double_where),
    Rule("safe_norm", "sqrt(sum(a**2))", "where(s > 0, sqrt(where(s > 0, s, 1)), 0) with s = sum(a**2)",
         "always", _safe_norm,
         tradeoff="the gradient at a = 0 becomes 0, a subgradient, where the norm has no derivative; "
         "sqrt(s + eps) instead keeps a smooth gradient but shifts every value by up to sqrt(eps)"),
)

RULES_BY_NAME = {rule.name: rule for rule in RULES}


def rewrite(node: n.Expr, rule: Rule) -> n.Expr:
    """`node` with `rule` applied wherever it matches, innermost first."""

    def visit(current: n.Expr) -> n.Expr:
        if isinstance(current, n.Call):
            current = n.Call(current.func, tuple(visit(a) for a in current.args),
                             tuple((k, visit(v)) for k, v in current.kwargs), current.method)
        elif isinstance(current, n.BinOp):
            current = n.BinOp(current.op, visit(current.left), visit(current.right))
        elif isinstance(current, n.UnaryOp):
            current = n.UnaryOp(current.op, visit(current.operand))
        elif isinstance(current, n.Compare):
            current = n.Compare(current.op, visit(current.left), visit(current.right))
        replaced = rule.apply(current)
        return replaced if replaced is not None else current

    return visit(node)


def rewrite_program(program: n.Program, rule: Rule) -> n.Program:
    """Every statement and the output of `program`, rewritten by `rule`."""
    statements = tuple(n.Assign(s.name, rewrite(s.value, rule)) for s in program.statements)
    return n.Program(statements, rewrite(program.output, rule), program.variables, program.source)


def matching(program: n.Program) -> Iterator[Rule]:
    """The rules that change `program`, in table order."""
    for rule in RULES:
        if rewrite_program(program, rule) != program:
            yield rule
