"""THE table of operations: one row feeds the parser's allow-list, the torch builder and the
sympy translator.

Adding a function is one `Op(...)` row here and one test. A row names

- `params`: the signature, in torch's own order and names (`clamp(input, min, max)`), each
  with a kind that says how the builder passes it (see `Param`);
- `torch`: the dotted path of the function form (`torch.exp`, `torch.nn.functional.softplus`);
  `method` says whether `torch.Tensor` has a method of the same name, so `x.exp()` is allowed;
- `sympy`: the symbolic meaning. For elementwise rows it maps sympy scalars to a sympy
  scalar (the translator applies it element by element); for the other kinds it maps numpy
  object arrays of sympy scalars to one (reductions, softmax, matmul);
- `domain` / `kinks` / `meets`: where the derivative exists (an open interval), points inside
  it where it does not (abs at 0), and the parameters where the input meeting their value is a
  branch boundary (maximum's `other`, clamp's `min` and `max`). The checker, the torch
  boundary finder (exact/boundaries.py) and the property tests read these.

Nothing here imports torch, sympy or numpy: the callables receive the modules they need.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

INF = math.inf


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


#: How the builders pass a parameter:
#:   tensor  any expression; a plain number is turned into a tensor (torch.exp(2) needs one)
#:   scalar  any expression; a plain number is passed as a Python number (x.pow(2))
#:   cond    a comparison or boolean tensor (the condition of where)
#:   dim     an integer or a tuple of integers, written literally
#:   bool    True or False, written literally
#:   number  a constant expression (no variables), passed as a Python number
ParamKind = Literal["tensor", "scalar", "cond", "dim", "bool", "number"]

#: How an operation treats elements, which decides how `check` compares it (exact/plan.py):
#: elementwise rows are differentiated with one symbol per variable; the others couple
#: elements and are compared with one symbol per element.
#: loss rows reduce an input against a target (labels, class indices) to their mean.
OpKind = Literal["elementwise", "reduction", "softmax", "matmul", "loss"]


@dataclass(frozen=True)
class Param:
    """One parameter of an operation: its name, how it is passed, its default."""

    name: str
    kind: ParamKind = "tensor"
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Op:
    """One operation of the language."""

    name: str
    params: tuple[Param, ...]
    torch: str
    sympy: Callable[..., Any]
    doc: str
    kind: OpKind = "elementwise"
    method: bool = True
    domain: tuple[float, float] = (-INF, INF)
    kinks: tuple[float, ...] = ()
    meets: tuple[str, ...] = ()  # parameters whose value, met by the input, is a branch boundary
    aliases: tuple[str, ...] = field(default=())

    def signature(self) -> str:
        return f"{self.name}({format_params(self.params)})"


def format_params(params: tuple[Param, ...]) -> str:
    parts = []
    for p in params:
        parts.append(p.name if p.required else f"{p.name}={p.default!r}")
    return ", ".join(parts)


X = (Param("input"),)
REDUCE = (Param("input"), Param("dim", "dim", None), Param("keepdim", "bool", False))


def _unary(name: str, sympy: Callable[..., Any], doc: str, **kw: Any) -> Op:
    return Op(name, X, f"torch.{name}", sympy, doc, **kw)


def _piecewise_max(sp: Any, a: Any, b: Any) -> Any:
    return sp.Piecewise((a, a > b), (b, True))


def _piecewise_min(sp: Any, a: Any, b: Any) -> Any:
    return sp.Piecewise((a, a < b), (b, True))


def _clamp(sp: Any, x: Any, min: Any = None, max: Any = None) -> Any:
    # torch computes min(max(x, min), max): when min > max every element becomes max.
    pieces = []
    if max is not None:
        pieces.append((max, x > max) if min is None else (max, sp.Or(x > max, min > max)))
    if min is not None:
        pieces.append((min, x < min))
    return sp.Piecewise(*pieces, (x, True)) if pieces else x


def _softplus(sp: Any, x: Any, beta: Any = 1, threshold: Any = 20) -> Any:
    # torch switches to the identity where beta*x > threshold; the symbolic form follows it.
    return sp.Piecewise((x, beta * x > threshold), (sp.log(1 + sp.exp(beta * x)) / beta, True))


def _axes(dim: Any, ndim: int) -> Any:
    if dim is None:
        return None
    dims = dim if isinstance(dim, tuple) else (dim,)
    # As torch: dims in [-ndim, ndim) (a 0-d tensor accepts 0 and -1), each named once.
    low, high = (-ndim, ndim - 1) if ndim else (-1, 0)
    for d in dims:
        if not low <= d <= high:
            raise IndexError(f"dimension {d} is out of range for a {ndim}-d tensor ([{low}, {high}])")
    axes = tuple(d % ndim if ndim else 0 for d in dims)
    if len(set(axes)) != len(axes):
        raise ValueError(f"dim {dim} names a dimension more than once")
    return axes


def _reduce(fn_name: str) -> Callable[..., Any]:
    def reduce(sp: Any, np: Any, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
        axes = _axes(dim, x.ndim)
        if x.ndim == 0:
            return x
        return np.asarray(getattr(np, fn_name)(x, axis=axes, keepdims=keepdim), dtype=object)

    return reduce


def _mean(sp: Any, np: Any, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    axes = _axes(dim, x.ndim)
    if x.ndim == 0:
        return x
    count = x.size if axes is None else math.prod(x.shape[a] for a in axes)
    return np.asarray(np.sum(x, axis=axes, keepdims=keepdim) / sp.Integer(count), dtype=object)


def _logsumexp(sp: Any, np: Any, x: Any, dim: Any, keepdim: bool = False) -> Any:
    exp = np.frompyfunc(sp.exp, 1, 1)
    log = np.frompyfunc(sp.log, 1, 1)
    axes = _axes(dim, x.ndim)
    if x.ndim == 0:
        return np.asarray(log(exp(x)), dtype=object)
    return np.asarray(log(np.sum(exp(x), axis=axes, keepdims=keepdim)), dtype=object)


def _softmax(log: bool) -> Callable[..., Any]:
    def softmax(sp: Any, np: Any, x: Any, dim: Any) -> Any:
        exp = np.frompyfunc(sp.exp, 1, 1)
        axes = _axes(dim, x.ndim)
        if x.ndim == 0:
            return np.asarray(sp.Integer(0) if log else sp.Integer(1), dtype=object)
        e = exp(x)
        total = np.sum(e, axis=axes, keepdims=True)
        if log:
            return np.asarray(x - np.frompyfunc(sp.log, 1, 1)(total), dtype=object)
        return np.asarray(e / total, dtype=object)

    return softmax


def _matmul(sp: Any, np: Any, a: Any, b: Any) -> Any:
    if a.ndim == 1 and b.ndim == 1:
        return np.asarray(np.sum(a * b), dtype=object)
    return np.asarray(np.matmul(a, b), dtype=object)


def _plain(value: Any) -> Any:
    """A 0-d object array (how the translator passes a number parameter) as its element."""
    return value.item() if hasattr(value, "ndim") and value.ndim == 0 else value


def _mean_of(sp: Any, np: Any, terms: Any) -> Any:
    return np.asarray(np.sum(terms) / sp.Integer(terms.size), dtype=object)


def _pairwise_loss(term: Callable[..., Any]) -> Callable[..., Any]:
    """The mean over elements of term(input, target), broadcast as torch's losses do."""

    def loss(sp: Any, np: Any, input: Any, target: Any, *extra: Any) -> Any:
        a, b = np.broadcast_arrays(np.asarray(input, dtype=object), np.asarray(target, dtype=object))
        fixed = [_plain(v) for v in extra]
        terms = np.frompyfunc(lambda x, y: term(sp, x, y, *fixed), 2, 1)(a, b)
        return _mean_of(sp, np, np.asarray(terms, dtype=object))

    return loss


def _class_index(sp: Any, value: Any) -> int:
    number = sp.sympify(value)
    if not number.is_Integer:
        raise TypeError("the target holds class indices: it must be known integers (randint), not variables")
    return int(number)


def _indexed_loss(row_loss: Callable[..., Any]) -> Callable[..., Any]:
    """cross_entropy / nll_loss: input [N, C] (or [C]) of scores, target [N] (or []) of classes."""

    def loss(sp: Any, np: Any, input: Any, target: Any) -> Any:
        if input.ndim not in (1, 2):
            raise ValueError(f"the input must be [N, C] or [C], not {input.ndim}-d")
        rows = input.reshape(1, -1) if input.ndim == 1 else input
        classes = np.asarray(target, dtype=object).reshape(-1)
        if len(classes) != rows.shape[0]:
            raise ValueError(f"{rows.shape[0]} rows of scores but {len(classes)} targets")
        terms = np.asarray([row_loss(sp, row, _class_index(sp, t)) for row, t in zip(rows, classes)], dtype=object)
        return _mean_of(sp, np, terms)

    return loss


def _smooth_l1(sp: Any, x: Any, y: Any, beta: Any = 1.0) -> Any:
    d = sp.Abs(x - y)
    return sp.Piecewise((sp.Rational(1, 2) * (x - y) ** 2 / beta, d < beta), (d - sp.Rational(1, 2) * beta, True))


LOSS = (Param("input"), Param("target"))

POS = (0.0, INF)
UNIT = (-1.0, 1.0)

OPS_LIST: tuple[Op, ...] = (
    _unary("abs", lambda sp, x: sp.Abs(x), "absolute value |x|", kinks=(0.0,)),
    _unary("sqrt", lambda sp, x: sp.sqrt(x), "square root", domain=POS),
    _unary("rsqrt", lambda sp, x: 1 / sp.sqrt(x), "reciprocal square root 1/sqrt(x)", domain=POS),
    _unary("square", lambda sp, x: x**2, "x**2"),
    _unary("reciprocal", lambda sp, x: 1 / x, "1/x (undefined at 0)", kinks=(0.0,)),
    _unary("exp", lambda sp, x: sp.exp(x), "exponential"),
    _unary("expm1", lambda sp, x: sp.exp(x) - 1, "exp(x) - 1, accurate near 0"),
    _unary("log", lambda sp, x: sp.log(x), "natural logarithm", domain=POS),
    _unary("log1p", lambda sp, x: sp.log(1 + x), "log(1 + x), accurate near 0", domain=(-1.0, INF)),
    _unary("log2", lambda sp, x: sp.log(x) / sp.log(2), "base-2 logarithm", domain=POS),
    _unary("log10", lambda sp, x: sp.log(x) / sp.log(10), "base-10 logarithm", domain=POS),
    _unary("sin", lambda sp, x: sp.sin(x), "sine"),
    _unary("cos", lambda sp, x: sp.cos(x), "cosine"),
    _unary("tan", lambda sp, x: sp.tan(x), "tangent", domain=(-math.pi / 2, math.pi / 2)),
    _unary("asin", lambda sp, x: sp.asin(x), "inverse sine", domain=UNIT),
    _unary("acos", lambda sp, x: sp.acos(x), "inverse cosine", domain=UNIT),
    _unary("atan", lambda sp, x: sp.atan(x), "inverse tangent"),
    _unary("sinh", lambda sp, x: sp.sinh(x), "hyperbolic sine"),
    _unary("cosh", lambda sp, x: sp.cosh(x), "hyperbolic cosine"),
    _unary("tanh", lambda sp, x: sp.tanh(x), "hyperbolic tangent"),
    _unary("asinh", lambda sp, x: sp.asinh(x), "inverse hyperbolic sine"),
    _unary("acosh", lambda sp, x: sp.acosh(x), "inverse hyperbolic cosine", domain=(1.0, INF)),
    _unary("atanh", lambda sp, x: sp.atanh(x), "inverse hyperbolic tangent", domain=UNIT),
    _unary("sigmoid", lambda sp, x: 1 / (1 + sp.exp(-x)), "logistic sigmoid 1/(1+exp(-x))"),
    Op(
        "logsigmoid", X, "torch.nn.functional.logsigmoid",
        lambda sp, x: -sp.log(1 + sp.exp(-x)), "log(sigmoid(x)), computed stably", method=False,
    ),
    Op(
        "softplus",
        (Param("input"), Param("beta", "number", 1.0), Param("threshold", "number", 20.0)),
        "torch.nn.functional.softplus", _softplus,
        "log(1 + exp(beta*x))/beta, linear where beta*x > threshold", method=False,
    ),
    _unary("relu", lambda sp, x: sp.Piecewise((x, x > 0), (0, True)), "max(x, 0)", kinks=(0.0,)),
    _unary("erf", lambda sp, x: sp.erf(x), "Gauss error function"),
    _unary("erfc", lambda sp, x: sp.erfc(x), "complementary error function 1 - erf(x)"),
    Op(
        "pow", (Param("input", "scalar"), Param("exponent", "scalar")), "torch.pow",
        lambda sp, x, p: x**p, "input ** exponent",
    ),
    Op(
        "clamp",
        (Param("input"), Param("min", "scalar", None), Param("max", "scalar", None)),
        "torch.clamp", _clamp, "limit to [min, max]", meets=("min", "max"),
    ),
    Op(
        "where",
        (Param("condition", "cond"), Param("input", "scalar"), Param("other", "scalar")),
        "torch.where",
        lambda sp, c, a, b: sp.Piecewise((a, c), (b, True)),
        "input where condition holds, else other", method=False,
    ),
    Op("maximum", (Param("input"), Param("other")), "torch.maximum", _piecewise_max,
       "elementwise maximum of two tensors", meets=("other",)),
    Op("minimum", (Param("input"), Param("other")), "torch.minimum", _piecewise_min,
       "elementwise minimum of two tensors", meets=("other",)),
    Op("sum", REDUCE, "torch.sum", _reduce("sum"), "sum of elements (over dim)", kind="reduction"),
    Op("mean", REDUCE, "torch.mean", _mean, "mean of elements (over dim)", kind="reduction"),
    Op("prod", (Param("input"), Param("dim", "dim", None), Param("keepdim", "bool", False)),
       "torch.prod", _reduce("prod"), "product of elements (over one dim)", kind="reduction"),
    Op("logsumexp", (Param("input"), Param("dim", "dim"), Param("keepdim", "bool", False)),
       "torch.logsumexp", _logsumexp, "log(sum(exp(x))) over dim, computed stably",
       kind="reduction"),
    Op("softmax", (Param("input"), Param("dim", "dim")), "torch.softmax", _softmax(log=False),
       "exp(x) / sum(exp(x)) over dim", kind="softmax"),
    Op("log_softmax", (Param("input"), Param("dim", "dim")), "torch.log_softmax",
       _softmax(log=True), "log(softmax(x)) over dim, computed stably", kind="softmax"),
    Op("matmul", (Param("input"), Param("other")), "torch.matmul", _matmul,
       "matrix product (the @ operator)", kind="matmul"),
    # Losses, mean-reduced as torch's defaults are (for --loss on a model's output `out`).
    Op("cross_entropy", LOSS, "torch.nn.functional.cross_entropy",
       _indexed_loss(lambda sp, row, t: sp.log(sum(sp.exp(v) for v in row)) - row[t]),
       "mean of logsumexp(input) - input[target] over rows; target: class indices (randint)",
       kind="loss", method=False),
    Op("nll_loss", LOSS, "torch.nn.functional.nll_loss", _indexed_loss(lambda sp, row, t: -row[t]),
       "mean of -input[target] over rows (input: log-probabilities); target: class indices",
       kind="loss", method=False),
    Op("mse_loss", LOSS, "torch.nn.functional.mse_loss", _pairwise_loss(lambda sp, x, y: (x - y) ** 2),
       "mean of (input - target)**2", kind="loss", method=False),
    Op("l1_loss", LOSS, "torch.nn.functional.l1_loss", _pairwise_loss(lambda sp, x, y: sp.Abs(x - y)),
       "mean of |input - target|", kind="loss", method=False),
    Op("smooth_l1_loss", (*LOSS, Param("beta", "number", 1.0)), "torch.nn.functional.smooth_l1_loss",
       _pairwise_loss(_smooth_l1), "mean of 0.5*d**2/beta where |d| < beta, else |d| - beta/2 (d = input - target)",
       kind="loss", method=False),
    Op("binary_cross_entropy_with_logits", LOSS, "torch.nn.functional.binary_cross_entropy_with_logits",
       _pairwise_loss(lambda sp, x, y: sp.log(1 + sp.exp(x)) - x * y),
       "mean of log(1 + exp(input)) - input*target (target: probabilities in [0, 1])",
       kind="loss", method=False),
)

OPS: dict[str, Op] = {op.name: op for op in OPS_LIST}

#: Operators of the language and the torch node they build, for documentation.
OPERATORS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow", "@": "matmul"}


@functools.lru_cache(maxsize=None)  # a 20,000-operation program resolves its paths 20,000 times
def resolve_torch(path: str) -> Callable[..., Any]:
    """The torch callable for a dotted path, imported on first use."""
    import importlib

    module_name, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)
