"""Where a derivative is undefined (outside the domain) and where it has a kink.

Both are read off the exact formula, vectorised: the walker visits the sympy tree and, at
each node whose meaning has a domain (log needs a positive argument, sqrt a non-negative
one, asin |a| < 1, 1/a a non-zero one), marks the points where its argument is outside.
The domains are those of `ops.py`, in the form sympy writes them (sqrt is a Pow with
exponent 1/2). Kinks are the points where a branch changes: Abs/sign at 0, a Piecewise
condition `a > b` where a == b (relu, clamp, where), Max/Min where the arguments tie.

Inside a Piecewise only the branch that is selected counts, so `where(x > 0, log(x), 0)`
is defined everywhere: a mask of "active" points is carried down the tree.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy
import torch

from .symbolic import CHUNK, _Evaluator

#: Relative distance to a kink below which a point is kept out of finite differences.
NEAR_KINK = 1e-4
#: A sum smaller than this share of its largest term lost most of its digits to cancellation:
#: float64 agreement there proves nothing (`1e20*(sqrt(x**2+1) - x)` at 1e8 is 0 on both sides).
CANCELLATION = 1e-8


class _Walker:
    def __init__(
        self, env: Mapping[Any, torch.Tensor], size: int, evaluator: _Evaluator | None = None,
        masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        # Walkers of one chunk may share an evaluator (each subexpression computed once for
        # the function and all its derivatives) and mark straight into slices of the
        # whole-size result masks (zeros), instead of fresh masks concatenated afterwards.
        self.evaluator = evaluator if evaluator is not None else _Evaluator(env, size)
        self.size = size
        if masks is None:
            masks = tuple(torch.zeros(size, dtype=torch.bool) for _ in range(3))  # type: ignore[assignment]
        self.undefined, self.kink, self.near = masks  # type: ignore[misc]
        self.cancel: torch.Tensor | None = None  # set by the caller to also mark cancellations
        # The symbols a derivative is taken in (exact mode: one element's): a branch whose
        # condition none of them moves is no kink of that partial derivative.
        self.wrt: set[Any] | None = None
        self.seen: set[Any] = set()

    def value(self, expr: Any) -> torch.Tensor:
        return self.evaluator.value(expr)

    def walk(self, expr: Any, active: torch.Tensor | None = None) -> None:
        import sympy

        if not expr.free_symbols or not self._first_visit("walk", expr, active):
            return
        if isinstance(expr, sympy.Piecewise):
            self._piecewise(expr, active)
            return
        self._domain(expr, active)
        self._kinks(expr, active)
        if self.cancel is not None and expr.is_Add:
            self._cancellation(expr, active)
        for arg in expr.args:
            self.walk(arg, active)

    def _first_visit(self, kind: str, expr: Any, active: torch.Tensor | None) -> bool:
        """Whether `expr` under the branch mask `active` is new to this walker.

        Masks are compared by content: nested where(...) conditions build equal masks anew
        at every level, and walking a shared subexpression once per mask object made the
        walk exponential in the nesting (a generated program hung here)."""
        key = (kind, expr, None if active is None else active.numpy().tobytes())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def _mark(self, mask: torch.Tensor, where: torch.Tensor, active: torch.Tensor | None) -> None:
        mask |= where if active is None else (where & active)

    def _domain(self, expr: Any, active: torch.Tensor | None) -> None:
        import sympy

        outside = None
        if isinstance(expr, sympy.log):
            outside = self.value(expr.args[0]) <= 0
        elif isinstance(expr, (sympy.asin, sympy.acos, sympy.atanh)):
            outside = self.value(expr.args[0]).abs() >= 1
        elif isinstance(expr, sympy.acosh):
            outside = self.value(expr.args[0]) <= 1
        elif expr.is_Pow:
            outside = self._pow_domain(expr.base, expr.exp)
        if outside is not None:
            self._mark(self.undefined, outside, active)

    def _pow_domain(self, base: Any, exponent: Any) -> torch.Tensor | None:
        if exponent.is_Integer:
            return self.value(base) == 0 if exponent < 0 else None
        if exponent.is_number:
            # A fractional power: real only for base >= 0, and its derivative at 0 is
            # infinite below exponent 1.
            b = self.value(base)
            return b < 0 if float(exponent) > 1 else b <= 0
        if base.free_symbols:
            return self.value(base) <= 0  # d/d(exponent) needs log(base)
        return None

    def _cancellation(self, expr: Any, active: torch.Tensor | None) -> None:
        terms = [a for a in expr.args if a.free_symbols]
        if not terms:
            return
        # In numpy, on one thread: abs, maximum, a product and comparisons give the same bits
        # either way, and on a busy machine each of the ten chunk-sized torch kernels this was
        # (per sum, per chunk) waited for torch's second, spinning OpenMP thread: 5 of a
        # 10^7-point check's 15 s at load 6 (bench/README.md, item 11).
        largest = numpy.abs(self.value(terms[0]).numpy())
        for term in terms[1:]:
            numpy.maximum(largest, numpy.abs(self.value(term).numpy()), out=largest)  # nan wins, as in torch
        # largest > 0 and finite, and the sum lost more than 1/CANCELLATION of it
        lost = numpy.abs(self.value(expr).numpy()) <= CANCELLATION * largest
        lost &= largest > 0
        lost &= largest < numpy.inf
        if active is not None:
            lost &= active.numpy()
        cancel = self.cancel.numpy()  # type: ignore[union-attr]  # the same memory: marked in place
        cancel |= lost

    def _moves(self, expr: Any) -> bool:
        return self.wrt is None or bool(expr.free_symbols & self.wrt)

    def _kinks(self, expr: Any, active: torch.Tensor | None) -> None:
        import sympy

        if not self._moves(expr):
            return
        if isinstance(expr, (sympy.Abs, sympy.sign, sympy.Heaviside)):
            self._boundary(self.value(expr.args[0]), torch.zeros(()), active)
        elif isinstance(expr, (sympy.Max, sympy.Min)) and len(expr.args) == 2:
            self._boundary(self.value(expr.args[0]), self.value(expr.args[1]), active)

    def _piecewise(self, expr: Any, active: torch.Tensor | None) -> None:
        remaining = torch.ones(self.size, dtype=torch.bool) if active is None else active.clone()
        for piece in expr.args:
            cond = piece.cond
            if cond == True:  # noqa: E712 - sympy's true
                selected = remaining
            else:
                self._condition_kinks(cond, remaining)
                chosen = torch.as_tensor(self.evaluator.eval(cond)).expand(self.size)
                selected = remaining & chosen
                remaining = remaining & ~chosen
            self.walk(piece.expr, selected)

    def _condition_kinks(self, cond: Any, active: torch.Tensor) -> None:
        import sympy

        if not self._first_visit("condition", cond, active):
            return
        if isinstance(cond, sympy.core.relational.Relational):
            if self._moves(cond):
                self._boundary(self.value(cond.lhs), self.value(cond.rhs), active)
            self.walk(cond.lhs, active)
            self.walk(cond.rhs, active)
        elif isinstance(cond, sympy.ITE):
            # ITE(c, a, b): a counts only where c holds, b only where it does not (a branch of
            # a folded clamp(softmax(clamp(w)**p)) holds w**p for w < 0, unselected there).
            test, then, otherwise = cond.args
            self._condition_kinks(test, active)
            chosen = torch.as_tensor(self.evaluator.eval(test)).expand(self.size)
            self._condition_kinks(then, active & chosen)
            self._condition_kinks(otherwise, active & ~chosen)
        elif isinstance(cond, (sympy.And, sympy.Or, sympy.Not)):
            for arg in cond.args:
                self._condition_kinks(arg, active)

    def _boundary(self, a: torch.Tensor, b: torch.Tensor, active: torch.Tensor | None) -> None:
        b = torch.as_tensor(b)
        self._mark(self.kink, (a - b).abs() == 0, active)
        self._mark(self.near, near_each_other(a, b), active)


def near_each_other(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Where `a` and `b` are within NEAR_KINK of each other, relative to their size (at least 1)."""
    scale = torch.maximum(a.abs(), b.abs()).clamp(min=1.0)
    return (a - b).abs() <= NEAR_KINK * scale


def regions(
    function: Any, derivatives: list[Any], env: Mapping[Any, torch.Tensor], size: int, wrt: set[Any] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(undefined, kink, near_kink) boolean masks over `size` points.

    `undefined`: the function or a derivative is outside its domain there. `kink`: a
    derivative changes branch exactly there. `near_kink`: within NEAR_KINK (relative) of a
    branch change, too close for finite differences. Computed in chunks of CHUNK points.
    With `wrt`, only conditions that move with one of these symbols make kinks.
    """
    return _chunked(function, derivatives, env, size, wrt)  # type: ignore[return-value]


def analyse_all(
    function: Any, derivatives: list[Any], env: Mapping[Any, torch.Tensor], size: int
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]], torch.Tensor]:
    """The function's `undefined` mask (its own domain), and per derivative its
    (undefined | the function's undefined, kink, near_kink, float64 value): the same masks
    as `regions(function, [derivative], ...)` and the value of `evaluate(derivative, ...)`;
    last, where the function or a derivative subtracts near-equal terms (CANCELLATION).

    One evaluator per chunk serves the function's walk, every derivative's walk and their
    values, so a subexpression they share (sigmoid(x) in x*sigmoid(x) and its derivative)
    is computed once per chunk.
    """
    outside = torch.zeros(size, dtype=torch.bool)
    cancel = torch.zeros(size, dtype=torch.bool)
    found = [
        (*(torch.zeros(size, dtype=torch.bool) for _ in range(3)), torch.empty(size, dtype=torch.float64))
        for _ in derivatives
    ]
    for start in range(0, max(size, 1), CHUNK):
        stop = min(start + CHUNK, size)
        part = slice(start, stop)
        chunk = {s: (v[part] if v.dim() else v) for s, v in env.items()}
        evaluator = _Evaluator(chunk, stop - start)
        unused = (torch.zeros(stop - start, dtype=torch.bool), torch.zeros(stop - start, dtype=torch.bool))
        outer = _Walker(chunk, stop - start, evaluator, (outside[part], *unused))
        outer.cancel = cancel[part]
        # The function's own domain counts (log(x) at x < 0, where 1/x is finite); its
        # kinks are judged from the derivatives, element by element.
        outer.walk(function)
        for expr, (undefined, kink, near, value) in zip(derivatives, found):
            walker = _Walker(chunk, stop - start, evaluator, (undefined[part], kink[part], near[part]))
            walker.cancel = cancel[part]
            walker.walk(expr)
            walker.undefined |= outer.undefined
            value[part] = walker.value(expr)
    return outside, found, cancel


def _chunked(
    function: Any, derivatives: list[Any], env: Mapping[Any, torch.Tensor], size: int, wrt: set[Any] | None = None
) -> tuple[torch.Tensor, ...]:
    parts = []
    for start in range(0, max(size, 1), CHUNK):
        stop = min(start + CHUNK, size)
        chunk = {s: (v[start:stop] if v.dim() else v) for s, v in env.items()}
        parts.append(_regions(function, derivatives, chunk, stop - start, wrt))
    return tuple(torch.cat([p[i] for p in parts]) for i in range(3))


def _regions(
    function: Any, derivatives: list[Any], env: Mapping[Any, torch.Tensor], size: int, wrt: set[Any] | None = None
) -> tuple[torch.Tensor, ...]:
    walker = _Walker(env, size)
    walker.wrt = wrt
    for expr in derivatives:
        walker.walk(expr)
    if function is not None:
        # The function's own domain counts (log(x) at x < 0, where 1/x is finite); its
        # kinks are judged from the derivatives, element by element.
        outer = _Walker(env, size)
        outer.walk(function)
        walker.undefined |= outer.undefined
    return walker.undefined, walker.kink, walker.near
