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

from . import losses as L
from . import shapes as S

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
#:   sizes   an integer or a tuple of integers, any expression that is one (reshape(-1, V):
#:           V a --var); `variadic` rows take them as torch does, reshape(2, 3) or ((2, 3))
#:   tensors a list or tuple of tensor expressions (cat([a, b]))
#:   index   the subscript of x[...]: ints, slices, None, ..., integer tensors, boolean masks
#:   choice  a string, one of the row's `choices` (reduction="sum")
#:   mask    a comparison, or any expression that is a boolean tensor (masked_fill(x, pad, 0))
ParamKind = Literal["tensor", "scalar", "cond", "dim", "bool", "number", "sizes", "tensors", "index", "choice", "mask"]
#: Parameters whose value is passed as written (ints, tuples, strings), never as a tensor of
#: symbols: the interpreters and the chain rule read them as options.
LITERAL_KINDS = ("dim", "bool", "sizes", "index", "choice")

#: How an operation treats elements, which decides how `check` compares it (exact/plan.py):
#: elementwise rows are differentiated with one symbol per variable; the others couple
#: elements and are compared with one symbol per element.
#: loss rows reduce an input against a target (labels, class indices) to their mean.
#: shape rows move, copy or pick elements (reshape, transpose, x[...], cat, gather); split rows
#: return a tuple of tensors (chunk, split), to be indexed; constructor rows make a tensor
#: from numbers (arange: the labels of a contrastive loss).
OpKind = Literal["elementwise", "reduction", "softmax", "matmul", "loss", "shape", "split", "constructor"]
#: How a row is written: `f(x)` / `x.f()`, the attribute `x.T`, or the subscript `x[...]`.
OpForm = Literal["call", "attribute", "subscript"]


@dataclass(frozen=True)
class Param:
    """One parameter of an operation: its name, how it is passed, its default."""

    name: str
    kind: ParamKind = "tensor"
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()  # the strings a choice parameter takes
    variadic: bool = False  # sizes given as separate arguments, reshape(2, 3)

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
    form: OpForm = "call"
    function: bool = True  # whether a function form exists (torch has x.view(...), no view(x))

    def signature(self) -> str:
        if self.form == "attribute":
            return f"{self.params[0].name}.{self.name}"
        if self.form == "subscript":
            return f"{self.params[0].name}[{self.params[1].name}]"
        if not self.function:
            return f"{self.params[0].name}.{self.name}({format_params(self.params[1:])})"
        return f"{self.name}({format_params(self.params)})"


def format_params(params: tuple[Param, ...]) -> str:
    parts = []
    for p in params:
        if p.variadic:
            parts.append(f"*{p.name}")
        else:
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


LOSS = (Param("input"), Param("target"))
WEIGHT = Param("weight", "tensor", None)
IGNORE = Param("ignore_index", "number", -100)
REDUCTION = Param("reduction", "choice", "mean", choices=L.REDUCTIONS)
SIZES = Param("shape", "sizes", variadic=True)

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
    # -- shapes and indexing: each output element is one input element (language/shapes.py) --
    Op("reshape", (X[0], SIZES), "torch.reshape", S.reshape, "the same elements in another shape (-1: inferred)",
       kind="shape"),
    Op("view", (X[0], SIZES), "torch.Tensor.view", S.reshape, "reshape without a copy (method only: x.view(...))",
       kind="shape", function=False),
    Op("flatten", (X[0], Param("start_dim", "dim", 0), Param("end_dim", "dim", -1)), "torch.flatten", S.flatten,
       "merge dimensions start_dim..end_dim into one", kind="shape"),
    Op("unflatten", (X[0], Param("dim", "dim"), Param("sizes", "sizes")), "torch.unflatten", S.unflatten,
       "split dimension dim into sizes", kind="shape"),
    Op("transpose", (X[0], Param("dim0", "dim"), Param("dim1", "dim")), "torch.transpose", S.transpose,
       "swap two dimensions", kind="shape"),
    Op("permute", (X[0], Param("dims", "sizes", variadic=True)), "torch.permute", S.permute,
       "reorder the dimensions", kind="shape"),
    Op("T", X, "torch.Tensor.T", S.t_attribute, "x.T: the transpose (all dimensions reversed)", kind="shape",
       form="attribute", function=False),
    Op("mT", X, "torch.Tensor.mT", S.mt_attribute, "x.mT: the last two dimensions swapped", kind="shape",
       form="attribute", function=False),
    Op("squeeze", (X[0], Param("dim", "dim", None)), "torch.squeeze", S.squeeze,
       "drop dimensions of size 1 (only dim, when given)", kind="shape"),
    Op("unsqueeze", (X[0], Param("dim", "dim")), "torch.unsqueeze", S.unsqueeze, "insert a dimension of size 1",
       kind="shape"),
    Op("expand", (X[0], SIZES), "torch.Tensor.expand", S.expand,
       "broadcast to a larger shape without copying (-1 keeps a size)", kind="shape", function=False),
    Op("repeat", (X[0], Param("repeats", "sizes", variadic=True)), "torch.Tensor.repeat", S.repeat,
       "tile the tensor, repeats times along each dimension", kind="shape", function=False),
    Op("cat", (Param("tensors", "tensors"), Param("dim", "dim", 0)), "torch.cat", S.cat,
       "join a list of tensors along an existing dimension", kind="shape", method=False),
    Op("stack", (Param("tensors", "tensors"), Param("dim", "dim", 0)), "torch.stack", S.stack,
       "join a list of tensors along a new dimension", kind="shape", method=False),
    Op("chunk", (X[0], Param("chunks", "sizes"), Param("dim", "dim", 0)), "torch.chunk", S.chunk,
       "split into chunks pieces (a tuple: index it, x.chunk(2)[0])", kind="split"),
    Op("split", (X[0], Param("split_size_or_sections", "sizes"), Param("dim", "dim", 0)), "torch.split", S.split,
       "split into pieces of a size, or of listed sizes (a tuple: index it)", kind="split"),
    Op("gather", (X[0], Param("dim", "dim"), Param("index")), "torch.gather", S.gather,
       "pick input[..., index, ...] along dim, index an integer tensor", kind="shape"),
    Op("index_select", (X[0], Param("dim", "dim"), Param("index")), "torch.index_select", S.index_select,
       "the slices at a 1-d integer index along dim", kind="shape"),
    Op("masked_fill", (X[0], Param("mask", "mask"), Param("value", "number")), "torch.masked_fill", S.masked_fill,
       "value where the boolean mask holds, else the input", kind="shape"),
    Op("getitem", (X[0], Param("index", "index")), "operator.getitem", S.getitem,
       "x[...]: ints, slices (steps, negatives), None, ..., integer tensors, boolean masks", kind="shape",
       form="subscript", method=False, function=False),
    Op("arange", (Param("start", "sizes"), Param("end", "sizes", None), Param("step", "sizes", 1)), "torch.arange",
       S.arange, "the integers start, start+step, ... below end (labels: arange(n))", kind="constructor",
       method=False),
    # -- losses, with their options as torch.nn.functional names them (language/losses.py) --------
    Op("cross_entropy", (*LOSS, WEIGHT, IGNORE, REDUCTION, Param("label_smoothing", "number", 0.0)),
       "torch.nn.functional.cross_entropy", L.cross_entropy,
       "logsumexp(input) - input[target] over rows [N, C]; target: class indices; ignore_index rows count for nothing",
       kind="loss", method=False),
    Op("nll_loss", (*LOSS, WEIGHT, IGNORE, REDUCTION), "torch.nn.functional.nll_loss", L.nll_loss,
       "-input[target] over rows (input: log-probabilities); target: class indices", kind="loss", method=False),
    Op("mse_loss", (*LOSS, REDUCTION), "torch.nn.functional.mse_loss", L.pairwise(lambda sp, x, y: (x - y) ** 2),
       "(input - target)**2, reduced", kind="loss", method=False),
    Op("l1_loss", (*LOSS, REDUCTION), "torch.nn.functional.l1_loss", L.pairwise(lambda sp, x, y: sp.Abs(x - y)),
       "|input - target|, reduced", kind="loss", method=False),
    Op("smooth_l1_loss", (*LOSS, REDUCTION, Param("beta", "number", 1.0)), "torch.nn.functional.smooth_l1_loss",
       L.pairwise(L.smooth_l1), "0.5*d**2/beta where |d| < beta, else |d| - beta/2 (d = input - target)",
       kind="loss", method=False),
    Op("huber_loss", (*LOSS, REDUCTION, Param("delta", "number", 1.0)), "torch.nn.functional.huber_loss",
       L.pairwise(L.huber), "0.5*d**2 where |d| < delta, else delta*(|d| - delta/2)", kind="loss", method=False),
    Op("binary_cross_entropy", (*LOSS, WEIGHT, REDUCTION), "torch.nn.functional.binary_cross_entropy",
       L.binary_cross_entropy, "-(target*log(input) + (1 - target)*log(1 - input)); input: probabilities",
       kind="loss", method=False),
    Op("binary_cross_entropy_with_logits", (*LOSS, WEIGHT, REDUCTION, Param("pos_weight", "tensor", None)),
       "torch.nn.functional.binary_cross_entropy_with_logits", L.binary_cross_entropy_with_logits,
       "binary_cross_entropy(sigmoid(input), target), computed stably (target: probabilities in [0, 1])",
       kind="loss", method=False),
    Op("kl_div", (*LOSS, Param("reduction", "choice", "mean", choices=(*L.REDUCTIONS, "batchmean")),
                  Param("log_target", "bool", False)),
       "torch.nn.functional.kl_div", L.kl_div,
       "target*(log(target) - input), input: log-probabilities (reduction='batchmean' as the maths)",
       kind="loss", method=False),
    Op("cosine_similarity", (Param("x1"), Param("x2"), Param("dim", "dim", 1), Param("eps", "number", 1e-8)),
       "torch.nn.functional.cosine_similarity", L.cosine_similarity,
       "x1·x2 / (max(|x1|, eps)·max(|x2|, eps)) along dim", kind="reduction", method=False),
)

OPS: dict[str, Op] = {op.name: op for op in OPS_LIST}

#: Operators of the language and the torch node they build, for documentation.
OPERATORS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow", "@": "matmul"}


@functools.lru_cache(maxsize=None)  # a 20,000-operation program resolves its paths 20,000 times
def resolve_torch(path: str) -> Callable[..., Any]:
    """The torch callable for a dotted path, imported on first use."""
    import importlib

    module_name, _, attr = path.rpartition(".")
    if module_name == "torch.Tensor":  # a method or property of Tensor (x.view, x.T)
        return getattr(importlib.import_module("torch").Tensor, attr)
    return getattr(importlib.import_module(module_name), attr)
