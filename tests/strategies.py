"""Hypothesis strategies shared by the property and fuzz tests: random programs of gradcli's
language, each with its own direct torch computation and variable values inside every
operation's domain.

Each generated subexpression carries an interval [lo, hi] that holds every element of its
value for every value of the variables inside their boxes (interval arithmetic). An
operation is only applied where its argument's interval lies inside the operation's domain
(read from `ops.OPS`) with a margin, and where the result stays within BOUND, so `log`
never sees a non-positive number and `exp` never overflows, whatever values are drawn.

The torch computation (`Expr.fn`) is written here, independently of gradcli's builder, so a
test can compare gradcli's graph against what a PyTorch user would write by hand.
`op_intervals.COVERED` lists the operations generated; a test checks it covers all of `OPS`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from gradcli.language.ops import OPS
from op_intervals import (
    MARGIN, UNARY, Interval, bounded, broadcast, ends, even, in_domain, interval_mul, monotone, softplus_value,
)

#: GRADCLI_SLOW=1 selects the long runs (`GRADCLI_SLOW=1 pytest -m slow`).
SLOW = os.environ.get("GRADCLI_SLOW", "") not in ("", "0")


def examples(ci: int, slow: int) -> int:
    """How many hypothesis examples a test runs: `ci` normally, `slow` with GRADCLI_SLOW=1."""
    return slow if SLOW else ci


Env = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class Expr:
    """A generated subexpression: its text, its direct torch meaning, its range and shape."""

    text: str
    fn: Callable[[Env], torch.Tensor] = field(compare=False)
    lo: float
    hi: float
    shape: tuple[int, ...]
    names: frozenset[str]  # the variables it reads
    atomic: bool = True  # needs no parentheses as a method receiver
    grads: frozenset[str] | None = None  # the variables a gradient flows to (default: names)

    def __post_init__(self) -> None:
        if self.grads is None:
            object.__setattr__(self, "grads", self.names)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def wrapped(self) -> str:
        return self.text if self.atomic else f"({self.text})"


@dataclass(frozen=True)
class Case:
    """A generated program with values for its variables."""

    assignments: tuple[tuple[str, Expr], ...]
    output: Expr
    values: dict[str, Any]  # variable -> float or nested list

    @property
    def text(self) -> str:
        return "; ".join([f"{name} = {e.text}" for name, e in self.assignments] + [self.output.text])

    @property
    def variables(self) -> list[str]:
        return sorted(self.values)

    def var_options(self) -> list[str]:
        return [f"{name}={self.values[name]!r}" for name in self.variables]

    def leaves(self) -> dict[str, torch.Tensor]:
        return {
            name: torch.tensor(self.values[name], dtype=torch.float64, requires_grad=True)
            for name in self.variables
        }


def _const(value: float) -> Callable[[Env], torch.Tensor]:
    return lambda env: torch.tensor(value, dtype=torch.float64)


def call_text(name: str, receiver: Expr, rest: list[str], method: bool) -> str:
    """`name(receiver, rest...)` or, when the table allows it, `receiver.name(rest...)`."""
    if method and OPS[name].method and receiver.names:
        return f"{receiver.wrapped()}.{name}({', '.join(rest)})"
    return f"{name}({', '.join([receiver.text, *rest])})"


def shrink_to_scalar(e: Expr) -> Expr:
    """e.mean(): a 0-d tensor in the same range, which broadcasts with anything."""
    if e.shape == ():
        return e
    return Expr(f"{e.wrapped()}.mean()" if e.names else f"mean({e.text})",
                lambda env, f=e.fn: f(env).mean(), e.lo, e.hi, (), e.names)


def box_values(shape: tuple[int, ...], box: Interval) -> st.SearchStrategy[Any]:
    """Values for a variable: nested lists of floats inside `box` (a float for shape ())."""
    # XXX: no magnitudes below 1e-100 (0 itself is kept): torch's double backward of prod
    # divides by the input squared, so with y = [1, 1, 6e-277] its Hessian-vector product is
    # -2.5e260 instead of -0.9, a true torch bug that check --order 2 rightly reports.
    element = st.floats(box[0], box[1], allow_nan=False, allow_infinity=False).filter(
        lambda v: v == 0 or abs(v) > 1e-100)
    if shape == ():
        return element
    return st.lists(element, min_size=math.prod(shape), max_size=math.prod(shape)).map(
        lambda flat: torch.tensor(flat, dtype=torch.float64).reshape(shape).tolist()
    )


# -- the generator ---------------------------------------------------------------------------
# Each builder takes hypothesis' `draw` and `sub` (draws a smaller subexpression) and returns
# an Expr; where its operation does not fit (a shape, a domain), it falls back to a simpler
# one rather than rejecting the example, so hypothesis never runs out of valid programs.

Builder = Callable[[Any, Callable[[], Expr]], Expr]
NAMES = ("x", "y", "w")
SHAPES = ((), (3,), (2, 3), (3, 3))
BOXES = ((0.2, 1.5), (-1.5, -0.2), (-1.0, 1.0), (1.1, 3.0), (-0.5, 0.5), (0.1, 0.9), (-3.0, 3.0), (2.0, 5.0))
CONSTANTS = (0.5, 2.0, 3.0, -1.0, 1e-3, 10.0, -0.25, 1.5)


def _compound(text: str, fn: Callable[[Env], torch.Tensor], interval: Interval, shape: tuple[int, ...],
              *parts: Expr, atomic: bool = False, grads: frozenset[str] | None = None) -> Expr:
    names = frozenset().union(*(p.names for p in parts))
    grads = frozenset().union(*(p.grads for p in parts)) if grads is None else grads
    return Expr(text, fn, interval[0], interval[1], shape, names, atomic, grads)


def _max_of(a: Expr, b: Expr, largest: bool = True, method: bool = False) -> Expr:
    b = b if broadcast(a.shape, b.shape) is not None else shrink_to_scalar(b)
    pick, name = (max, "maximum") if largest else (min, "minimum")
    fn = torch.maximum if largest else torch.minimum
    return _compound(call_text(name, a, [b.text], method), lambda env: fn(a.fn(env), b.fn(env)),
                     (pick(a.lo, b.lo), pick(a.hi, b.hi)), broadcast(a.shape, b.shape), a, b, atomic=True)


def unary(draw: Any, sub: Callable[[], Expr]) -> Expr:
    a = sub()
    fits = [name for name, (_, interval) in UNARY.items()
            if in_domain(name, a.lo, a.hi) and bounded(interval(a.lo, a.hi))]
    name = draw(st.sampled_from(fits))  # sin, cos, atan, tanh... always fit a bounded range
    torch_fn, interval = UNARY[name]
    text = call_text(name, a, [], draw(st.booleans()))
    return _compound(text, lambda env: torch_fn(a.fn(env)), interval(a.lo, a.hi), a.shape, a, atomic=True)


def negate(draw: Any, sub: Callable[[], Expr]) -> Expr:
    a = sub()
    return _compound(f"-{a.wrapped()}", lambda env: -a.fn(env), (-a.hi, -a.lo), a.shape, a)


def softplus(draw: Any, sub: Callable[[], Expr]) -> Expr:
    a = sub()
    beta, threshold = draw(st.sampled_from((1.0, 2.0, 0.5))), draw(st.sampled_from((20.0, 5.0, 1.0)))
    form = draw(st.integers(0, 2))
    if form == 0:
        beta, threshold = 1.0, 20.0
    text = ("softplus({a})", "softplus({a}, beta={b})", "softplus({a}, {b}, {t})")[form]
    if form == 1:
        threshold = 20.0
    torch_fn = lambda t: F.softplus(t, beta=beta, threshold=threshold)  # noqa: E731
    interval = ends(lambda v: softplus_value(v, beta, threshold), a.lo, a.hi)
    if not bounded(interval):
        return a
    return _compound(text.format(a=a.text, b=beta, t=threshold), lambda env: torch_fn(a.fn(env)),
                     interval, a.shape, a, atomic=True)


def arithmetic(draw: Any, sub: Callable[[], Expr]) -> Expr:
    a, b = sub(), sub()
    if broadcast(a.shape, b.shape) is None:
        b = shrink_to_scalar(b)
    op = draw(st.sampled_from("+-*/"))
    if op == "/" and -MARGIN < b.hi and b.lo < MARGIN:
        op = "+"  # never divide by a range that holds 0
    intervals = {
        "+": (a.lo + b.lo, a.hi + b.hi),
        "-": (a.lo - b.hi, a.hi - b.lo),
        "*": interval_mul((a.lo, a.hi), (b.lo, b.hi)),
        "/": interval_mul((a.lo, a.hi), (1 / b.hi, 1 / b.lo)) if op == "/" else (0.0, 0.0),
    }
    fns = {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div}
    if not bounded(intervals[op]):
        return _max_of(a, b)
    return _compound(f"{a.wrapped()} {op} {b.wrapped()}", lambda env: fns[op](a.fn(env), b.fn(env)),
                     intervals[op], broadcast(a.shape, b.shape), a, b)


def power(draw: Any, sub: Callable[[], Expr]) -> Expr:
    a = sub()
    form = draw(st.sampled_from(("{a} ** {b}", "pow({a}, {b})", "{a}.pow({b})")))
    if not a.names and form.startswith("{a}."):
        form = "pow({a}, {b})"
    if draw(st.booleans()):  # a constant exponent: PowBackward0
        c = draw(st.sampled_from((2, 3, 4, 0.5, 1.5, -1, -2, -0.5, 2.5)))
        if (c != int(c) and a.lo < MARGIN) or (c < 0 and -MARGIN < a.hi and a.lo < MARGIN):
            return a
        interval = (even if c == int(c) and c % 2 == 0 else monotone)(lambda v: float(v**c))(a.lo, a.hi)
        b_text, fn = (f"({c})" if c < 0 else repr(c)), (lambda env: a.fn(env) ** c)
        shape, parts = a.shape, (a,)
    else:  # a tensor exponent: PowBackward1, defined for a positive base
        b = sub()
        if a.lo < MARGIN:
            return a
        if broadcast(a.shape, b.shape) is None:
            b = shrink_to_scalar(b)
        logs = (math.log(a.lo), math.log(a.hi))
        interval = tuple(math.exp(min(v, 700.0)) for v in interval_mul(logs, (b.lo, b.hi)))  # 700: no overflow
        b_text, fn = b.wrapped() if form == "{a} ** {b}" else b.text, (lambda env: a.fn(env) ** b.fn(env))
        shape, parts = broadcast(a.shape, b.shape), (a, b)
    if not bounded(interval):
        return a
    text = form.format(a=a.wrapped() if form != "pow({a}, {b})" else a.text, b=b_text)
    return _compound(text, fn, interval, shape, *parts, atomic=not form.startswith("{a} **"))


def clamp(draw: Any, sub: Callable[[], Expr]) -> Expr:
    a = sub()
    first = round(draw(st.floats(a.lo - 1, a.hi + 1)), 2)
    second = round(first + draw(st.floats(0.1, 3.0)), 2)
    low, high = draw(st.sampled_from(((first, None), (None, first), (first, second))))
    args = ", ".join(f"{k}={v}" for k, v in (("min", low), ("max", high)) if v is not None)
    if low is not None and high is not None and draw(st.booleans()):
        args = f"{low}, {high}"  # positional, in torch's order

    def clip(v: float) -> float:
        v = v if low is None else max(v, low)
        return v if high is None else min(v, high)

    text = call_text("clamp", a, [args], draw(st.booleans()))
    return _compound(text, lambda env: torch.clamp(a.fn(env), min=low, max=high),
                     (clip(a.lo), clip(a.hi)), a.shape, a, atomic=True)


COMPARE = {">": torch.gt, ">=": torch.ge, "<": torch.lt, "<=": torch.le, "==": torch.eq, "!=": torch.ne}


def where(draw: Any, sub: Callable[[], Expr]) -> Expr:
    p, q, a, b = sub(), sub(), sub(), sub()
    if broadcast(p.shape, q.shape, a.shape, b.shape) is None:
        p, q, b = shrink_to_scalar(p), shrink_to_scalar(q), shrink_to_scalar(b)
    cmp = draw(st.sampled_from(sorted(COMPARE)))
    text = f"where({p.wrapped()} {cmp} {q.wrapped()}, {a.text}, {b.text})"
    return _compound(text, lambda env: torch.where(COMPARE[cmp](p.fn(env), q.fn(env)), a.fn(env), b.fn(env)),
                     (min(a.lo, b.lo), max(a.hi, b.hi)), broadcast(p.shape, q.shape, a.shape, b.shape),
                     p, q, a, b, atomic=True, grads=a.grads | b.grads)  # no gradient through a condition


def extreme(draw: Any, sub: Callable[[], Expr]) -> Expr:
    a, b = sub(), sub()
    return _max_of(a, b, largest=draw(st.booleans()), method=draw(st.booleans()))


def _dims(draw: Any, ndim: int, tuples: bool) -> tuple[int | tuple[int, ...], list[int]]:
    """A dim argument valid for `ndim` dimensions and the (non-negative) axes it names."""
    if ndim == 0:
        d = draw(st.sampled_from((0, -1)))
        return d, []
    if tuples and ndim == 2 and draw(st.booleans()):
        d = draw(st.sampled_from(((0, 1), (-1, 0), (1,))))
        return d, sorted(x % 2 for x in d)
    d = draw(st.integers(-ndim, ndim - 1))
    return d, [d % ndim]


def reduction(draw: Any, sub: Callable[[], Expr]) -> Expr:
    a = sub()
    name = draw(st.sampled_from(("sum", "mean", "prod", "logsumexp")))
    keepdim = draw(st.booleans())
    if name != "logsumexp" and draw(st.booleans()):
        dim, axes, keepdim = None, list(range(len(a.shape))), False
    else:
        dim, axes = _dims(draw, len(a.shape), tuples=name in ("sum", "mean"))
    count = math.prod(a.shape[i] for i in axes)
    if dim is None:
        shape = ()
    else:
        shape = tuple((1 if keepdim else None) if i in axes else s for i, s in enumerate(a.shape))
        shape = tuple(s for s in shape if s is not None)
    if name == "sum":
        interval = (count * a.lo, count * a.hi)
    elif name == "mean":
        interval = (a.lo, a.hi)
    elif name == "prod":
        interval = (1.0, 1.0)
        for _ in range(count):
            interval = interval_mul(interval, (a.lo, a.hi))
    else:
        interval = (a.lo + math.log(count), a.hi + math.log(count))
    if not bounded(interval):
        name, interval = "mean", (a.lo, a.hi)
    kwargs: dict[str, Any] = {} if dim is None else {"dim": dim}
    if dim is not None and (keepdim or draw(st.booleans())):
        kwargs["keepdim"] = keepdim
    rest = [f"{k}={v!r}" for k, v in kwargs.items()]
    torch_fn = getattr(torch, name)
    text = call_text(name, a, rest, draw(st.booleans()))
    return _compound(text, lambda env: torch_fn(a.fn(env), **kwargs), interval, shape, a, atomic=True)


def softmax(draw: Any, sub: Callable[[], Expr]) -> Expr:
    a = sub()
    log = draw(st.booleans())
    dim, axes = _dims(draw, len(a.shape), tuples=False)
    k = a.shape[axes[0]] if axes else 1
    width = a.hi - a.lo
    if width > 50:  # a softmax element could be ~exp(-width): too small for a log later
        return a
    # Each element of softmax over k values within [lo, hi] lies between these bounds.
    low, high = 1 / (1 + (k - 1) * math.exp(width)), 1 / (1 + (k - 1) * math.exp(-width))
    name = "log_softmax" if log else "softmax"
    interval = (math.log(low), math.log(high)) if log else (low, high)
    if not bounded(interval):
        return a
    torch_fn = torch.log_softmax if log else torch.softmax
    dim_text = draw(st.sampled_from((f"dim={dim}", str(dim))))
    text = call_text(name, a, [dim_text], draw(st.booleans()))
    return _compound(text, lambda env: torch_fn(a.fn(env), dim), interval, a.shape, a, atomic=True)


def matmul(draw: Any, sub: Callable[[], Expr]) -> Expr:
    a, b = sub(), sub()
    if not (a.shape and b.shape and len(a.shape) <= 2 and a.shape[-1] == b.shape[0]):
        return _max_of(a, b)
    k = b.shape[0]
    lo, hi = interval_mul((a.lo, a.hi), (b.lo, b.hi))
    interval = (k * lo, k * hi)
    if not bounded(interval):
        return _max_of(a, b)
    shape = tuple(torch.empty(a.shape).matmul(torch.empty(b.shape)).shape)
    form = draw(st.sampled_from(("{a} @ {b}", "matmul({a}, {b})", "{a}.matmul({b})")))
    if form.startswith("{a}.") and not a.names:
        form = "matmul({a}, {b})"
    infix = form == "{a} @ {b}"
    text = form.format(a=a.wrapped() if form != "matmul({a}, {b})" else a.text,
                       b=b.wrapped() if infix else b.text)
    return _compound(text, lambda env: torch.matmul(a.fn(env), b.fn(env)), interval, shape, a, b, atomic=not infix)


BUILDERS: tuple[Builder, ...] = (
    unary, unary, unary, negate, softplus, arithmetic, arithmetic, power, clamp, where, extreme,
    reduction, softmax, matmul,
)


def _leaf(draw: Any, leaves: list[Expr]) -> Expr:
    if draw(st.integers(0, 5)) == 0:
        c = draw(st.one_of(st.sampled_from(CONSTANTS), st.floats(-3, 3).map(lambda v: round(v, 2))))
        if draw(st.integers(0, 5)) == 0:
            name, c = draw(st.sampled_from((("pi", math.pi), ("e", math.e))))
            return Expr(name, _const(c), c, c, (), frozenset())
        return Expr(repr(c), _const(c), c, c, (), frozenset(), atomic=c >= 0)
    return draw(st.sampled_from(leaves))


@st.composite
def expressions(draw: Any, leaves: list[Expr], depth: int) -> Expr:
    if depth <= 0 or draw(st.integers(0, 4)) == 0:
        return _leaf(draw, leaves)
    builder = draw(st.sampled_from(BUILDERS))
    return builder(draw, lambda: draw(expressions(leaves, depth - 1)))


@st.composite
def programs(draw: Any, max_depth: int = 4, max_assignments: int = 2) -> Case:
    """A program of 0..max_assignments statements and an output, and its variables' values."""
    count = draw(st.integers(1, len(NAMES)))
    shapes = {v: draw(st.sampled_from(SHAPES)) for v in NAMES[:count]}
    boxes = {v: draw(st.sampled_from(BOXES)) for v in NAMES[:count]}
    leaves = [Expr(v, lambda env, v=v: env[v], *boxes[v], shapes[v], frozenset({v})) for v in shapes]
    assignments = []
    for i in range(draw(st.integers(0, max_assignments))):
        e = draw(expressions(leaves, max_depth))
        assignments.append((f"h{i}", e))
        leaves += [replace(e, text=f"h{i}", atomic=True)] * 3  # later statements mostly use it
    output = draw(expressions(leaves, max_depth))
    if not output.grads:  # a constant program has no gradient to check
        c, v = output, leaves[0]
        c = c if broadcast(c.shape, v.shape) is not None else shrink_to_scalar(c)
        output = _compound(f"{c.wrapped()} + {v.text}", lambda env: c.fn(env) + v.fn(env),
                           (c.lo + v.lo, c.hi + v.hi), broadcast(c.shape, v.shape), c, v)
    used = frozenset().union(output.names, *(e.names for _, e in assignments))
    values = {v: draw(box_values(shapes[v], boxes[v])) for v in sorted(used)}
    return Case(tuple(assignments), output, values)


# -- Hostile families (issue 18): where float64 misleads a checker --------------------------
# Each draws an expression, values, and the truth computed without gradcli: torch's own
# autograd for what gradcli's autograd side sees, mpmath at 50 digits for the derivative.
# A property then says: check is ok exactly when autograd agrees with the truth (no false
# alarm, no missed nan).


@dataclass(frozen=True)
class Hostile:
    """One expression of one variable x, its points, and its true derivative."""

    text: str
    values: tuple[float, ...]
    torch_fn: Callable[[torch.Tensor], torch.Tensor]
    derivative: Callable[[Any], Any] | None  # mpmath, exact; None: only the nan rule applies
    boundary: float | None = None  # a where(...) boundary: the point itself is not compared

    def var_options(self) -> list[str]:
        return [f"x={list(self.values)!r}"]


def _mp() -> Any:
    import mpmath

    return mpmath


def _sig(x: Any) -> Any:
    return 1 / (1 + _mp().exp(-x))


#: (text, torch function, exact derivative) of functions defined on every real.
SMOOTH = (
    ("x", lambda x: x, lambda x: 1),
    ("3*x", lambda x: 3 * x, lambda x: 3),
    ("x + 1e20", lambda x: x + 1e20, lambda x: 1),
    ("tanh(x)", torch.tanh, lambda x: 1 - _mp().tanh(x) ** 2),
    ("sigmoid(x)", torch.sigmoid, lambda x: _sig(x) * (1 - _sig(x))),
    ("softplus(x)", F.softplus, _sig),
    ("x*sigmoid(x)", lambda x: x * torch.sigmoid(x), lambda x: _sig(x) + x * _sig(x) * (1 - _sig(x))),
    ("log(sigmoid(x))", lambda x: torch.log(torch.sigmoid(x)), lambda x: 1 - _sig(x)),
    ("log(1+exp(x))", lambda x: torch.log(1 + torch.exp(x)), _sig),
    ("exp(x)", torch.exp, lambda x: _mp().exp(x)),
    ("sin(x)", torch.sin, lambda x: _mp().cos(x)),
    ("x**2", lambda x: x**2, lambda x: 2 * x),
)

#: (text, torch function, exact derivative where the function is defined, the pole or edge).
EDGED = (
    ("1/x", lambda x: 1 / x, lambda x: -1 / x**2, 0.0),
    ("log(x)", torch.log, lambda x: 1 / x if x > 0 else None, 0.0),
    ("sqrt(x)", torch.sqrt, lambda x: 1 / (2 * _mp().sqrt(x)) if x > 0 else None, 0.0),
    ("1/(x - 0.5)", lambda x: 1 / (x - 0.5), lambda x: -1 / (x - _mp().mpf(0.5)) ** 2, 0.5),
    ("asin(x)", torch.asin, lambda x: 1 / _mp().sqrt(1 - x**2) if abs(x) < 1 else None, 1.0),
    ("log(1 - x)", lambda x: torch.log(1 - x), lambda x: -1 / (1 - x) if x < 1 else None, 1.0),
)


@st.composite
def extreme_magnitudes(draw: Any) -> Hostile:
    """Smooth functions at |x| from 1e-300 to 1e300 (and 0)."""
    text, fn, derivative = draw(st.sampled_from(SMOOTH))
    exponents = draw(st.lists(st.floats(-300, 300), min_size=1, max_size=4))
    signs = draw(st.lists(st.sampled_from((1.0, -1.0)), min_size=len(exponents), max_size=len(exponents)))
    values = tuple(sorted({s * 10.0**e for s, e in zip(signs, exponents)} | {draw(st.sampled_from((0.0, 1.0, -1.0)))}))
    return Hostile(text, values, fn, derivative)


@st.composite
def poles_and_edges(draw: Any) -> Hostile:
    """Points at, next to and 10^-k away from a pole or a domain edge, on both sides."""
    text, fn, derivative, edge = draw(st.sampled_from(EDGED))
    offsets = draw(st.lists(st.integers(1, 300), min_size=1, max_size=4))
    values = {edge + s * 10.0**-k for k in offsets for s in (1.0, -1.0)}
    values |= {edge, math.nextafter(edge, math.inf), math.nextafter(edge, -math.inf), edge + 0.25}
    if draw(st.booleans()):  # linspace's ~1e-17 near-zero point, shifted to the edge
        values |= {edge + float(v) for v in torch.linspace(-1, 1, 201, dtype=torch.float64)[99:102]}
    return Hostile(text, tuple(sorted(values)), fn, derivative)


@st.composite
def under_and_overflow(draw: Any) -> Hostile:
    """Smooth functions where exp under- or overflows in float64: |x| around 700-760 and 30-40."""
    text, fn, derivative = draw(st.sampled_from(SMOOTH))
    values = draw(st.lists(st.one_of(st.floats(700, 760), st.floats(-760, -700), st.floats(30, 40), st.floats(-40, -30)),
                           min_size=1, max_size=4, unique=True))
    return Hostile(text, tuple(sorted(values)), fn, derivative)


#: Masks with == and != (text template with {f} and {c}); a point equal to c is a boundary.
MASKS = ("where(x != {c}, {f}, 1)", "where(x == {c}, 1, {f})", "where({c} != x, {f}, 0.5*x)")


@st.composite
def equality_masks(draw: Any) -> Hostile:
    """where(...) with == and !=, at points that include the boundary c exactly."""
    text, fn, derivative = draw(st.sampled_from(SMOOTH[:8] + SMOOTH[10:]))
    c = draw(st.sampled_from((0.0, 1.0, -0.5)))
    template = draw(st.sampled_from(MASKS))
    if draw(st.booleans()):  # sinc and friends: the branch divides by x - c
        value = _SMOOTH_VALUES[text]
        fn = lambda x, fn=fn, c=c: fn(x) / (x - c)
        derivative = lambda x, d=derivative, v=value, c=c: _quotient(x, d, v, c)
        text = f"({text})/(x - {c})"
    values = tuple(sorted({c, *draw(st.lists(st.floats(-3, 3).filter(lambda v: v != c), min_size=1, max_size=4))}))
    if template.startswith("where(x == "):
        mask = lambda x, fn=fn, c=c: torch.where(x == c, 1.0, fn(x))
    elif "0.5*x" in template:
        mask = lambda x, fn=fn, c=c: torch.where(c != x, fn(x), 0.5 * x)
    else:
        mask = lambda x, fn=fn, c=c: torch.where(x != c, fn(x), 1.0)
    return Hostile(template.format(f=text, c=c), values, mask, derivative, boundary=c)


def _quotient(x: Any, d: Any, v: Any, c: float) -> Any:
    """d/dx f(x)/(x - c) = f'/(x - c) - f/(x - c)**2: the two terms cancel to ~1/|x - c|**2
    of their size near c, so the working precision grows with that (x = 1e-180 needs 360
    more digits; found by the slow run, where 50 digits gave 0 instead of 0.25)."""
    mp = _mp()
    gap = abs(x - c)
    extra = int(-2 * mp.log10(gap)) + 10 if 0 < gap < 1 else 0
    with mp.extradps(extra):
        return d(x) / (x - c) - v(mp, x) / (x - c) ** 2


_SMOOTH_VALUES = {
    "x": lambda mp, t: t, "3*x": lambda mp, t: 3 * t, "x + 1e20": lambda mp, t: t + mp.mpf(10) ** 20,
    "tanh(x)": lambda mp, t: mp.tanh(t), "sigmoid(x)": lambda mp, t: _sig(t),
    "softplus(x)": lambda mp, t: mp.log(1 + mp.exp(t)), "x*sigmoid(x)": lambda mp, t: t * _sig(t),
    "log(sigmoid(x))": lambda mp, t: mp.log(_sig(t)), "log(1+exp(x))": lambda mp, t: mp.log(1 + mp.exp(t)),
    "exp(x)": lambda mp, t: mp.exp(t), "sin(x)": lambda mp, t: mp.sin(t), "x**2": lambda mp, t: t**2,
}

#: Coupled programs over a where(...) kink; (template, nan-free) where g is the factor.
COUPLED_FACTORS = (("x", True), ("sin(x)", True), ("x**2", True),
                   ("where(x > 0, sqrt(x), 0)", False), ("where(x > 0, log(x), 0)", False))


@st.composite
def coupled_kinks(draw: Any) -> Hostile:
    """sum(softmax(where(x > 0, x, c*x)) * g): a kink at x = 0 only. Exact mode up to 32
    elements, gradcheck alone past that; a g whose autograd is nan beside the kink (the
    where trap) must be caught, a smooth g must pass."""
    c = draw(st.sampled_from((0.1, 0.5, 2.0)))
    g, _ = draw(st.sampled_from(COUPLED_FACTORS))
    count = draw(st.sampled_from((5, 9, 41)))
    values = tuple(float(v) for v in torch.linspace(-1, 1, count, dtype=torch.float64))
    torch_g = {"x": lambda x: x, "sin(x)": torch.sin, "x**2": lambda x: x**2,
               "where(x > 0, sqrt(x), 0)": lambda x: torch.where(x > 0, torch.sqrt(x), 0.0),
               "where(x > 0, log(x), 0)": lambda x: torch.where(x > 0, torch.log(x), 0.0)}[g]
    fn = lambda x, c=c, tg=torch_g: (torch.softmax(torch.where(x > 0, x, c * x), 0) * tg(x)).sum()
    return Hostile(f"sum(softmax(where(x > 0, x, {c}*x), dim=0) * {g})", values, fn, None, boundary=0.0)
