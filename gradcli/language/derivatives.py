"""THE table of local derivatives: what each backward node multiplies the gradient by.

One row per operation of `ops.py` (and per operator of the language), written once, read by
`trace --symbolic` (gradcli/chain/). An elementwise row gives, for each differentiable
parameter, the partial derivative of one output element with respect to the matching
input element, as a formula in the inputs and the output `out`, written the way torch's
backward computes it (sigmoid's is `out*(1 - out)`: SigmoidBackward0 reads its saved result,
not its input) and naming the saved tensor it reads (`uses`). An element-coupling row
(reductions, softmax, matmul) gives its vector-Jacobian product, the rule its backward node
applies to the whole incoming gradient, and the same in words for the reader.

tests/language/test_derivatives.py holds every row against sympy's differentiation of the row's own
`ops.py` meaning and against torch's backward of that op at random points.

Nothing here imports torch, sympy or numpy: the callables receive the modules they need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Partial:
    """∂out/∂param for one elementwise parameter: `formula(sp, *args, out)`, args in the op's
    parameter order, and the torch saved tensor(s) the backward node reads for it."""

    formula: Callable[..., Any]
    uses: tuple[str, ...] = ()


@dataclass(frozen=True)
class Local:
    """The local derivative of one operation (see the module docstring)."""

    op: str  # a name of ops.OPS, or an operator: + - * / ** neg
    partials: dict[str, Partial] = field(default_factory=dict)  # elementwise rows
    # Coupling rows: vjp(sp, np, grad, args, out, **options) -> {param: gradient array}.
    vjp: Callable[..., dict[str, Any]] | None = None
    # Coupling rows, in words: what ∂out/∂input is, in index notation.
    words: str = ""
    uses: tuple[str, ...] = ()
    # A whole-tensor sum or mean read elementwise: ∂out/∂u_i as a formula of the count.
    per_element: Callable[[Any, int], Any] | None = None
    # Why `trace --symbolic` has no formula for this operation (it names it and stops).
    refused: str = ""

    @property
    def coupling(self) -> bool:
        return self.vjp is not None


def _p(formula: Callable[..., Any], *uses: str) -> Partial:
    return Partial(formula, uses)


def _unary(op: str, formula: Callable[..., Any], *uses: str) -> Local:
    return Local(op, {"input": _p(formula, *uses)})


def _step(sp: Any, cond: Any) -> Any:
    return sp.Piecewise((1, cond), (0, True))


def _clamp_partials() -> dict[str, Partial]:
    # As ops._clamp: max wins where min > max; torch's ClampBackward1 masks the same way.
    def above(sp: Any, x: Any, lo: Any, hi: Any) -> Any:
        if hi is None:
            return sp.false
        return x > hi if lo is None else sp.Or(x > hi, lo > hi)

    def d_input(sp: Any, x: Any, lo: Any, hi: Any, out: Any) -> Any:
        below = sp.false if lo is None else x < lo
        return sp.Piecewise((0, above(sp, x, lo, hi)), (0, below), (1, True))

    def d_min(sp: Any, x: Any, lo: Any, hi: Any, out: Any) -> Any:
        return sp.Piecewise((0, above(sp, x, lo, hi)), (1, x < lo), (0, True))

    def d_max(sp: Any, x: Any, lo: Any, hi: Any, out: Any) -> Any:
        return _step(sp, above(sp, x, lo, hi))

    return {"input": _p(d_input, "_saved_self"), "min": _p(d_min, "_saved_min"), "max": _p(d_max, "_saved_max")}


def _pow_partials(base: str, exponent: str) -> dict[str, Partial]:
    # PowBackward1 sets the exponent's gradient to 0 where the base is 0 and the exponent
    # is >= 0 (log(0) would make it nan); elsewhere it is out*log(base).
    return {
        base: _p(lambda sp, x, p, out: p * x ** (p - 1), "_saved_self", "_saved_exponent"),
        exponent: _p(
            lambda sp, x, p, out: sp.Piecewise((0, sp.And(sp.Eq(x, 0), p >= 0)), (out * sp.log(x), True)),
            "_saved_result", "_saved_self",
        ),
    }


def sum_to(np: Any, grad: Any, shape: tuple[int, ...]) -> Any:
    """`grad` (broadcast shape) summed down to `shape`, as torch's sum_to_size (an input
    broadcast forward receives the sum of its copies' gradients)."""
    lead = grad.ndim - len(shape)
    if lead:
        grad = grad.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return np.asarray(grad, dtype=object)


def _axes(x: Any, dim: Any) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(x.ndim))
    dims = dim if isinstance(dim, tuple) else (dim,)
    return tuple(d % x.ndim for d in dims) if x.ndim else ()


def _unreduce(np: Any, value: Any, x: Any, dim: Any, keepdim: bool) -> Any:
    """A reduced array broadcast back over x's shape (the reduced axes reinserted)."""
    value = np.asarray(value, dtype=object)
    if not keepdim:
        for axis in sorted(_axes(x, dim)):
            value = np.expand_dims(value, axis)
    return np.broadcast_to(value, x.shape)


def _sum_vjp(sp: Any, np: Any, g: Any, args: dict[str, Any], out: Any, dim: Any = None, keepdim: bool = False) -> dict[str, Any]:
    x = args["input"]
    return {"input": np.asarray(_unreduce(np, g, x, dim, keepdim), dtype=object)}


def _mean_vjp(sp: Any, np: Any, g: Any, args: dict[str, Any], out: Any, dim: Any = None, keepdim: bool = False) -> dict[str, Any]:
    x = args["input"]
    count = 1
    for axis in _axes(x, dim):
        count *= x.shape[axis]
    return {"input": np.asarray(_unreduce(np, g, x, dim, keepdim) / sp.Integer(max(count, 1)), dtype=object)}


def _prod_vjp(sp: Any, np: Any, g: Any, args: dict[str, Any], out: Any, dim: Any = None, keepdim: bool = False) -> dict[str, Any]:
    # The product of the other elements: out/x_i where no x_i is 0 (torch's general case).
    x = args["input"]
    return {"input": np.asarray(_unreduce(np, g * out, x, dim, keepdim) / x, dtype=object)}


def _logsumexp_vjp(sp: Any, np: Any, g: Any, args: dict[str, Any], out: Any, dim: Any = None, keepdim: bool = False) -> dict[str, Any]:
    x = args["input"]
    exp = np.frompyfunc(sp.exp, 1, 1)
    return {"input": np.asarray(_unreduce(np, g, x, dim, keepdim) * exp(x - _unreduce(np, out, x, dim, keepdim)), dtype=object)}


def _softmax_vjp(sp: Any, np: Any, g: Any, args: dict[str, Any], out: Any, dim: Any = None) -> dict[str, Any]:
    x = args["input"]
    if x.ndim == 0:
        return {"input": np.asarray(sp.Integer(0), dtype=object)}
    total = np.sum(g * out, axis=_axes(x, dim), keepdims=True)
    return {"input": np.asarray(out * (g - total), dtype=object)}


def _log_softmax_vjp(sp: Any, np: Any, g: Any, args: dict[str, Any], out: Any, dim: Any = None) -> dict[str, Any]:
    x = args["input"]
    if x.ndim == 0:
        return {"input": np.asarray(sp.Integer(0), dtype=object)}
    exp = np.frompyfunc(sp.exp, 1, 1)
    return {"input": np.asarray(g - exp(out) * np.sum(g, axis=_axes(x, dim), keepdims=True), dtype=object)}


def _matmul_vjp(sp: Any, np: Any, g: Any, args: dict[str, Any], out: Any) -> dict[str, Any]:
    a, b = args["input"], args["other"]
    g = np.asarray(g, dtype=object)
    if a.ndim == 1 and b.ndim == 1:  # a dot product
        return {"input": np.asarray(g.item() * b, dtype=object), "other": np.asarray(g.item() * a, dtype=object)}
    # Promote 1-d operands as matmul does, apply the 2-d rule, then drop the added axes.
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = np.expand_dims(g2, -2)
    if b.ndim == 1:
        g2 = np.expand_dims(g2, -1)
    grad_a = np.matmul(g2, np.swapaxes(b2, -1, -2))
    grad_b = np.matmul(np.swapaxes(a2, -1, -2), g2)
    if a.ndim == 1:
        grad_a = grad_a.reshape(grad_a.shape[:-2] + grad_a.shape[-1:])
    if b.ndim == 1:
        grad_b = grad_b.reshape(grad_b.shape[:-1])
    return {"input": sum_to(np, np.asarray(grad_a, dtype=object), a.shape),
            "other": sum_to(np, np.asarray(grad_b, dtype=object), b.shape)}


def _moved(key: str) -> Callable[..., dict[str, Any]]:
    """The vjp of a row that only moves elements (reshape, transpose, x[...], expand, gather):
    the forward applied to the input's element positions says where each output element came
    from, and the gradient goes back there, summed where one element was copied (expand,
    repeat, a repeated index): what ViewBackward, IndexBackward and ExpandBackward do."""

    def vjp(sp: Any, np: Any, g: Any, args: dict[str, Any], out: Any, **options: Any) -> dict[str, Any]:
        from .ops import OPS

        op = OPS[key]
        x = np.asarray(args["input"], dtype=object)
        positions = np.empty(x.shape, dtype=object)
        for number, index in enumerate(np.ndindex(*x.shape)):
            positions[index] = number
        moved = np.asarray(op.sympy(sp, np, positions, *(args.get(p.name, p.default) for p in op.params[1:])), dtype=object)
        grad = [sp.Integer(0)] * x.size
        g = np.broadcast_to(np.asarray(g, dtype=object), moved.shape)
        for source, flowing in zip(moved.flat, g.flat):
            grad[source] = grad[source] + flowing
        return {"input": np.asarray(grad, dtype=object).reshape(x.shape)}

    return vjp


def _masked_fill_vjp(sp: Any, np: Any, g: Any, args: dict[str, Any], out: Any, **options: Any) -> dict[str, Any]:
    x = np.asarray(args["input"], dtype=object)
    mask = np.broadcast_to(np.asarray(args["mask"], dtype=object), x.shape)
    keep = np.frompyfunc(lambda c, v: sp.Piecewise((0, c), (v, True)), 2, 1)
    return {"input": np.asarray(keep(mask, np.broadcast_to(g, x.shape)), dtype=object)}


def _differentiated(key: str) -> Callable[..., dict[str, Any]]:
    """The vjp as sympy differentiates the row's own meaning (cosine_similarity: torch's
    backward is that formula, written out by hand)."""

    def vjp(sp: Any, np: Any, g: Any, args: dict[str, Any], out: Any, **options: Any) -> dict[str, Any]:
        from .ops import OPS

        op = OPS[key]
        values = [args.get(p.name, p.default) for p in op.params]
        forward = np.asarray(op.sympy(sp, np, *values), dtype=object)
        g = np.broadcast_to(np.asarray(g, dtype=object), forward.shape)
        grads = {}
        for p in op.params:
            value = args.get(p.name)
            if p.kind != "tensor" or not isinstance(value, np.ndarray):
                continue
            grads[p.name] = np.asarray(
                [sum((gj * sp.diff(fj, v) for gj, fj in zip(g.flat, forward.flat)), sp.Integer(0)) for v in value.flat],
                dtype=object).reshape(value.shape)
        return grads

    return vjp


_MOVES = "∂out_j/∂u_i = 1 where output element j is input element i, else 0: the gradient goes back to where each element came from"


def _move(op: str) -> Local:
    return Local(op, vjp=_moved(op), words=_MOVES)


def _refused(op: str, why: str) -> Local:
    return Local(op, refused=why)


_LIST = "takes a list of tensors; --symbolic follows one tensor per edge (check computes its exact derivative)"
_TUPLE = "returns a tuple of tensors; --symbolic follows one tensor per node (check computes its exact derivative)"
_LOSS = "couples scores with integer labels (test_losses.py checks it against torch); write it out, e.g. ((out - y)**2).mean()"

LOCALS_LIST: tuple[Local, ...] = (
    # -- operators ---------------------------------------------------------------------------
    Local("+", {"self": _p(lambda sp, a, b, out: sp.Integer(1)), "other": _p(lambda sp, a, b, out: sp.Integer(1))}),
    Local("-", {"self": _p(lambda sp, a, b, out: sp.Integer(1)), "other": _p(lambda sp, a, b, out: sp.Integer(-1))}),
    Local("*", {"self": _p(lambda sp, a, b, out: b, "_saved_other"), "other": _p(lambda sp, a, b, out: a, "_saved_self")}),
    Local("/", {"self": _p(lambda sp, a, b, out: 1 / b, "_saved_other"),
                "other": _p(lambda sp, a, b, out: -a / b**2, "_saved_self", "_saved_other")}),
    Local("**", _pow_partials("self", "other")),
    Local("neg", {"input": _p(lambda sp, x, out: sp.Integer(-1))}),
    # -- elementwise functions -----------------------------------------------------------------
    _unary("abs", lambda sp, x, out: sp.sign(x), "_saved_self"),
    _unary("sqrt", lambda sp, x, out: 1 / (2 * out), "_saved_result"),
    _unary("rsqrt", lambda sp, x, out: -out**3 / 2, "_saved_result"),
    _unary("square", lambda sp, x, out: 2 * x, "_saved_self"),
    _unary("reciprocal", lambda sp, x, out: -out**2, "_saved_result"),
    _unary("exp", lambda sp, x, out: out, "_saved_result"),
    _unary("expm1", lambda sp, x, out: out + 1, "_saved_result"),
    _unary("log", lambda sp, x, out: 1 / x, "_saved_self"),
    _unary("log1p", lambda sp, x, out: 1 / (1 + x), "_saved_self"),
    _unary("log2", lambda sp, x, out: 1 / (x * sp.log(2)), "_saved_self"),
    _unary("log10", lambda sp, x, out: 1 / (x * sp.log(10)), "_saved_self"),
    _unary("sin", lambda sp, x, out: sp.cos(x), "_saved_self"),
    _unary("cos", lambda sp, x, out: -sp.sin(x), "_saved_self"),
    _unary("tan", lambda sp, x, out: 1 + out**2, "_saved_result"),
    _unary("asin", lambda sp, x, out: 1 / sp.sqrt(1 - x**2), "_saved_self"),
    _unary("acos", lambda sp, x, out: -1 / sp.sqrt(1 - x**2), "_saved_self"),
    _unary("atan", lambda sp, x, out: 1 / (1 + x**2), "_saved_self"),
    _unary("sinh", lambda sp, x, out: sp.cosh(x), "_saved_self"),
    _unary("cosh", lambda sp, x, out: sp.sinh(x), "_saved_self"),
    _unary("tanh", lambda sp, x, out: 1 - out**2, "_saved_result"),
    _unary("asinh", lambda sp, x, out: 1 / sp.sqrt(x**2 + 1), "_saved_self"),
    _unary("acosh", lambda sp, x, out: 1 / sp.sqrt(x**2 - 1), "_saved_self"),
    _unary("atanh", lambda sp, x, out: 1 / (1 - x**2), "_saved_self"),
    _unary("sigmoid", lambda sp, x, out: out * (1 - out), "_saved_result"),
    _unary("logsigmoid", lambda sp, x, out: 1 / (1 + sp.exp(x)), "_saved_self"),
    Local("softplus", {"input": _p(
        lambda sp, x, beta, threshold, out: sp.Piecewise((1, beta * x > threshold), (1 / (1 + sp.exp(-beta * x)), True)),
        "_saved_self", "_saved_beta", "_saved_threshold",
    )}),
    _unary("relu", lambda sp, x, out: _step(sp, out > 0), "_saved_result"),
    _unary("erf", lambda sp, x, out: 2 / sp.sqrt(sp.pi) * sp.exp(-x**2), "_saved_self"),
    _unary("erfc", lambda sp, x, out: -2 / sp.sqrt(sp.pi) * sp.exp(-x**2), "_saved_self"),
    Local("pow", _pow_partials("input", "exponent")),
    Local("clamp", _clamp_partials()),
    Local("where", {
        "input": _p(lambda sp, c, a, b, out: _step(sp, c), "_saved_condition"),
        "other": _p(lambda sp, c, a, b, out: sp.Piecewise((0, c), (1, True)), "_saved_condition"),
    }),
    # torch splits the gradient in half where the two are equal.
    Local("maximum", {
        "input": _p(lambda sp, a, b, out: sp.Piecewise((1, a > b), (sp.Rational(1, 2), sp.Eq(a, b)), (0, True)), "_saved_self", "_saved_other"),
        "other": _p(lambda sp, a, b, out: sp.Piecewise((1, b > a), (sp.Rational(1, 2), sp.Eq(a, b)), (0, True)), "_saved_self", "_saved_other"),
    }),
    Local("minimum", {
        "input": _p(lambda sp, a, b, out: sp.Piecewise((1, a < b), (sp.Rational(1, 2), sp.Eq(a, b)), (0, True)), "_saved_self", "_saved_other"),
        "other": _p(lambda sp, a, b, out: sp.Piecewise((1, b < a), (sp.Rational(1, 2), sp.Eq(a, b)), (0, True)), "_saved_self", "_saved_other"),
    }),
    # -- element-coupling operations -----------------------------------------------------------
    Local("sum", vjp=_sum_vjp, words="∂out/∂u_i = 1: the gradient is copied to every summed element",
          per_element=lambda sp, count: sp.Integer(1)),
    Local("mean", vjp=_mean_vjp, words="∂out/∂u_i = 1/N over the N averaged elements",
          uses=("_saved_self_sym_numel",), per_element=lambda sp, count: 1 / sp.Integer(count)),
    Local("prod", vjp=_prod_vjp, words="∂out/∂u_i = out/u_i, the product of the other elements",
          uses=("_saved_result", "_saved_self")),
    Local("logsumexp", vjp=_logsumexp_vjp, words="∂out/∂u_i = exp(u_i − out), the softmax of u",
          uses=("_saved_result", "_saved_self")),
    Local("softmax", vjp=_softmax_vjp, words="∂s_j/∂u_i = s_j(δ_ij − s_i), s the saved result",
          uses=("_saved_result",)),
    Local("log_softmax", vjp=_log_softmax_vjp, words="∂o_j/∂u_i = δ_ij − exp(o_i), o the saved result",
          uses=("_saved_result",)),
    Local("matmul", vjp=_matmul_vjp, words="∂(A@B)/∂A: grad @ Bᵀ;  ∂(A@B)/∂B: Aᵀ @ grad",
          uses=("_saved_self", "_saved_other")),
    Local("cosine_similarity", vjp=_differentiated("cosine_similarity"),
          words="∂cos/∂a_i = b_i/(|a||b|) − cos·a_i/|a|² (and alike for b)", uses=("_saved_x1", "_saved_x2")),
    # -- shapes and indexing: every element goes back where it came from -------------------------
    *(_move(op) for op in ("reshape", "view", "flatten", "unflatten", "transpose", "permute", "T", "mT", "squeeze",
                           "unsqueeze", "expand", "repeat", "gather", "index_select", "getitem")),
    Local("masked_fill", vjp=_masked_fill_vjp, words="∂out/∂u_i = 0 where the mask holds, else 1",
          uses=("_saved_mask",)),
    Local("arange"),  # makes integers from numbers: nothing flows back
    _refused("cat", _LIST), _refused("stack", _LIST), _refused("chunk", _TUPLE), _refused("split", _TUPLE),
    # -- losses ----------------------------------------------------------------------------------
    *(_refused(op, _LOSS) for op in ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
                                     "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div")),
)

LOCALS: dict[str, Local] = {row.op: row for row in LOCALS_LIST}

#: The parameters of the operators, in torch's names (the saved tensors are `_saved_<name>`).
OPERATOR_PARAMS: dict[str, tuple[str, ...]] = {
    "+": ("self", "other"), "-": ("self", "other"), "*": ("self", "other"),
    "/": ("self", "other"), "**": ("self", "other"), "neg": ("input",),
}
