"""The exact meaning of the loss rows of ops.py, with their options as torch.nn.functional
names them: `reduction`, class `weight`, `ignore_index`, `label_smoothing`, `pos_weight`,
`beta`/`delta`, `log_target`.

Each meaning follows torch's documented formula (tests/language/test_losses.py holds every one against
torch's own function, value and gradient): a `mean` over class indices with weights divides by
the summed weights of the rows that count, and ignored rows add nothing and count for nothing.

Nothing here imports torch, sympy or numpy: the callables receive the modules they need.
"""

from __future__ import annotations

from typing import Any, Callable

REDUCTIONS = ("none", "mean", "sum")


def plain(value: Any) -> Any:
    """A 0-d object array (how the translator passes a number parameter) as its element."""
    return value.item() if hasattr(value, "ndim") and value.ndim == 0 else value


def reduce(sp: Any, np: Any, terms: Any, reduction: str, count: Any = None) -> Any:
    """torch's reduction of per-element losses; `count` divides a mean (default: the size)."""
    terms = np.asarray(terms, dtype=object)
    if reduction == "none":
        return terms
    total = np.sum(terms) if terms.size else sp.Integer(0)
    if reduction == "sum":
        return np.asarray(total, dtype=object)
    return np.asarray(total / (sp.Integer(terms.size) if count is None else count), dtype=object)


def pairwise(term: Callable[..., Any]) -> Callable[..., Any]:
    """A loss of `term(input, target, *options)` element by element, broadcast as torch's
    losses do, then reduced: (input, target, reduction, *options)."""

    def loss(sp: Any, np: Any, input: Any, target: Any, reduction: str = "mean", *extra: Any) -> Any:
        a, b = np.broadcast_arrays(np.asarray(input, dtype=object), np.asarray(target, dtype=object))
        fixed = [plain(v) for v in extra]
        terms = np.frompyfunc(lambda x, y: term(sp, x, y, *fixed), 2, 1)(a, b)
        return reduce(sp, np, terms, reduction)

    return loss


def smooth_l1(sp: Any, x: Any, y: Any, beta: Any = 1.0) -> Any:
    d = sp.Abs(x - y)
    if beta == 0:
        return d
    return sp.Piecewise((sp.Rational(1, 2) * (x - y) ** 2 / beta, d < beta), (d - sp.Rational(1, 2) * beta, True))


def huber(sp: Any, x: Any, y: Any, delta: Any = 1.0) -> Any:
    d = sp.Abs(x - y)
    return sp.Piecewise((sp.Rational(1, 2) * (x - y) ** 2, d < delta), (delta * (d - sp.Rational(1, 2) * delta), True))


def class_index(sp: Any, value: Any) -> int:
    number = sp.sympify(value)
    if not number.is_Integer:
        raise TypeError("the target holds class indices: it must be known integers (randint), not variables")
    return int(number)


def _rows(np: Any, input: Any, target: Any) -> tuple[Any, list[Any]]:
    if input.ndim not in (1, 2):
        raise ValueError(f"the input must be [N, C] or [C], not {input.ndim}-d (flatten it: out.flatten(0, 1))")
    rows = input.reshape(1, -1) if input.ndim == 1 else input
    classes = list(np.asarray(target, dtype=object).reshape(-1))
    if len(classes) != rows.shape[0]:
        raise ValueError(f"{rows.shape[0]} rows of scores but {len(classes)} targets")
    return rows, classes


def _weights(sp: Any, np: Any, weight: Any, count: int) -> list[Any]:
    if weight is None:
        return [sp.Integer(1)] * count
    values = list(np.asarray(weight, dtype=object).reshape(-1))
    if len(values) != count:
        raise ValueError(f"weight has {len(values)} entries for {count} classes")
    return values


def _indexed(sp: Any, np: Any, log_probs: Any, target: Any, weight: Any, ignore_index: Any, reduction: str,
             smoothing: Any = 0) -> Any:
    """nll over rows of log-probabilities, with weights, ignored rows and label smoothing."""
    rows, classes = _rows(np, log_probs, target)
    classes_count = rows.shape[1]
    w = _weights(sp, np, weight, classes_count)
    ignore = int(plain(ignore_index))
    eps = sp.nsimplify(plain(smoothing)) if smoothing else sp.Integer(0)
    terms, counted = [], []
    for row, t in zip(rows, classes):
        c = class_index(sp, t)
        if c == ignore:
            terms.append(sp.Integer(0))
            continue
        if not 0 <= c < classes_count:
            raise IndexError(f"target {c} is out of bounds for {classes_count} classes")
        picked = -w[c] * row[c]
        smooth = -sum(w[k] * row[k] for k in range(classes_count)) / classes_count
        terms.append((1 - eps) * picked + eps * smooth if eps else picked)
        counted.append(w[c])
    if log_probs.ndim == 1:
        terms = terms[:1]
        if reduction == "none":
            return np.asarray(terms[0], dtype=object)
    return reduce(sp, np, np.asarray(terms, dtype=object), reduction, sum(counted, sp.Integer(0)))


def cross_entropy(sp: Any, np: Any, input: Any, target: Any, weight: Any = None, ignore_index: Any = -100,
                  reduction: str = "mean", label_smoothing: Any = 0.0) -> Any:
    rows = input.reshape(1, -1) if input.ndim == 1 else input
    if rows.ndim != 2:
        raise ValueError(f"the input must be [N, C] or [C], not {input.ndim}-d (flatten it: out.flatten(0, 1))")
    log_probs = np.asarray([[v - sp.log(sum(sp.exp(u) for u in row)) for v in row] for row in rows], dtype=object)
    return _indexed(sp, np, log_probs.reshape(input.shape), target, weight, ignore_index, reduction, label_smoothing)


def nll_loss(sp: Any, np: Any, input: Any, target: Any, weight: Any = None, ignore_index: Any = -100,
             reduction: str = "mean") -> Any:
    return _indexed(sp, np, input, target, weight, ignore_index, reduction)


def binary_cross_entropy(sp: Any, np: Any, input: Any, target: Any, weight: Any = None, reduction: str = "mean") -> Any:
    x, y = np.broadcast_arrays(np.asarray(input, dtype=object), np.asarray(target, dtype=object))
    terms = np.frompyfunc(lambda p, t: -(t * sp.log(p) + (1 - t) * sp.log(1 - p)), 2, 1)(x, y)
    if weight is not None:
        terms = terms * np.asarray(weight, dtype=object)
    return reduce(sp, np, terms, reduction)


def binary_cross_entropy_with_logits(sp: Any, np: Any, input: Any, target: Any, weight: Any = None,
                                     reduction: str = "mean", pos_weight: Any = None) -> Any:
    x, y = np.broadcast_arrays(np.asarray(input, dtype=object), np.asarray(target, dtype=object))
    p = np.ones(x.shape, dtype=object) if pos_weight is None else np.broadcast_to(np.asarray(pos_weight, dtype=object), x.shape)
    # -[p*y*log σ(x) + (1 - y)*log(1 - σ(x))], with log σ(x) = -log(1 + exp(-x)).
    terms = np.frompyfunc(
        lambda a, t, q: q * t * sp.log(1 + sp.exp(-a)) + (1 - t) * (a + sp.log(1 + sp.exp(-a))), 3, 1)(x, y, p)
    if weight is not None:
        terms = terms * np.asarray(weight, dtype=object)
    return reduce(sp, np, terms, reduction)


def kl_div(sp: Any, np: Any, input: Any, target: Any, reduction: str = "mean", log_target: bool = False) -> Any:
    x, y = np.broadcast_arrays(np.asarray(input, dtype=object), np.asarray(target, dtype=object))
    if log_target:
        terms = np.frompyfunc(lambda a, t: sp.exp(t) * (t - a), 2, 1)(x, y)
    else:  # xlogy: a zero target adds 0
        terms = np.frompyfunc(lambda a, t: sp.Integer(0) if t == 0 else t * (sp.log(t) - a), 2, 1)(x, y)
    if reduction == "batchmean":
        return reduce(sp, np, terms, "mean", sp.Integer(x.shape[0] if x.ndim else 1))
    return reduce(sp, np, terms, reduction)


def cosine_similarity(sp: Any, np: Any, x1: Any, x2: Any, dim: int = 1, eps: Any = 1e-8) -> Any:
    a, b = np.broadcast_arrays(np.asarray(x1, dtype=object), np.asarray(x2, dtype=object))
    axis = dim % max(a.ndim, 1)
    floor = sp.nsimplify(plain(eps))
    dot = np.sum(a * b, axis=axis)
    norm_a = np.frompyfunc(sp.sqrt, 1, 1)(np.sum(a * a, axis=axis))
    norm_b = np.frompyfunc(sp.sqrt, 1, 1)(np.sum(b * b, axis=axis))
    # torch divides by max(‖a‖, eps)·max(‖b‖, eps); away from 0 that is the plain product.
    high = np.frompyfunc(lambda n: sp.Max(n, floor), 1, 1)
    return np.asarray(dot / (high(norm_a) * high(norm_b)), dtype=object)
