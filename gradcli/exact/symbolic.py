"""The exact derivative: sympy differentiation under a time budget, evaluated vectorised.

sympy gives the truth as a formula; to compare it with autograd on 10^7 points the formula
is evaluated with torch in float64, by a small walker over the sympy tree (one torch call per
node, applied to whole tensors; no Python loop over points). The walker replaces
`lambdify(modules="torch")`, which fails on integer constants (`torch.sqrt(2)`), Heaviside
and erf (see NOTES.md); here each sympy function maps to one torch function in `_functions`.

Symbolic work can be slow (simplify on a large Piecewise), so it runs in a daemon thread
under a budget: simplification falls back to the unsimplified form, and differentiation
that overruns is reported as "symbolic comparison skipped", never a hang.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, TypeVar

import torch

T = TypeVar("T")

#: Seconds allowed for translating to sympy and differentiating, for one check.
SYMBOLIC_BUDGET = 30.0
#: Seconds allowed for simplifying the derivatives shown to the user (all of them together).
SIMPLIFY_BUDGET = 1.0
#: Larger formulas are shown as differentiated, unsimplified.
SIMPLIFY_MAX_OPS = 40
#: Points evaluated at once: bounds the memory of intermediate tensors on 10^7 points.
CHUNK = 1_000_000


class SymbolicTimeout(Exception):
    """The symbolic work did not finish within its budget."""


class Unsupported(Exception):
    """The derivative contains a sympy function with no torch meaning here."""


def within(budget: float, fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) in a daemon thread; SymbolicTimeout if it takes longer than `budget` s, and
    then the work is stopped (`_stop`): a sympy thread left running holds the GIL and slowed
    everything after it 5-50x."""
    from .._deep import run_deep

    if budget <= 0:  # no time at all: not even a fast (or cached) result may slip through
        raise SymbolicTimeout(f"the symbolic work took longer than {budget:g} s")
    outcome: dict[str, Any] = {}
    workers: list[int] = []

    def work(*values: Any) -> T:
        workers.append(threading.get_ident())  # run_deep may run it in a thread of its own
        return fn(*values)

    def target() -> None:
        try:
            outcome["value"] = run_deep(work, *args)
        except BaseException as exc:  # re-raised in the caller
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="gradcli-sympy", daemon=True)
    thread.start()
    thread.join(budget)
    if thread.is_alive():
        _stop(thread, workers)
        raise SymbolicTimeout(f"the symbolic work took longer than {budget:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class _Cancelled(BaseException):
    """Raised inside an overrunning symbolic thread to end it (never seen by a caller)."""


#: Seconds to wait for a cancelled thread to end (it ends at its next Python instruction; a
#: long call into C, such as one huge integer product, finishes first).
STOP_WAIT = 5.0


def _stop(thread: threading.Thread, workers: list[int]) -> None:
    """End the work by raising _Cancelled in the thread that runs it.

    Python has no API to kill a thread; CPython's PyThreadState_SetAsyncExc raises an
    exception in another thread at its next bytecode, which sympy (pure Python) reaches often.
    """
    import ctypes

    for ident in workers or [thread.ident]:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(_Cancelled))
    thread.join(STOP_WAIT)


def real_symbols(names: Any) -> dict[str, Any]:
    import sympy

    return {name: sympy.Symbol(name, real=True) for name in names}


def tame(expr: Any) -> Any:
    """The derivative as compared: DiracDelta (the second derivative of abs or a step) is 0
    everywhere except at the kink itself, and kinks are reported, not compared."""
    import sympy

    if expr.has(sympy.DiracDelta):
        expr = expr.replace(lambda e: isinstance(e, sympy.DiracDelta), lambda e: sympy.Integer(0))
    return expr


def simplify_all(exprs: dict[Any, Any], budget: float | None = None) -> dict[Any, Any]:
    """Simplified forms for display; the unsimplified form where time runs out or the
    formula is larger than SIMPLIFY_MAX_OPS operations (simplify's cost grows fast)."""
    import sympy

    shown: dict[Any, Any] = {}

    def work() -> None:
        for key, expr in exprs.items():
            if sympy.count_ops(expr) <= SIMPLIFY_MAX_OPS:
                try:
                    shown[key] = sympy.simplify(expr)
                except Exception:  # noqa: BLE001 - a failed simplification shows the plain form
                    pass

    try:
        within(SIMPLIFY_BUDGET if budget is None else budget, work)
    except SymbolicTimeout:
        pass  # out of budget: what was not simplified yet is shown as differentiated, below
    return {key: shown.get(key, expr) for key, expr in exprs.items()}


def evaluate(expr: Any, env: Mapping[Any, torch.Tensor], size: int) -> torch.Tensor:
    """The value of sympy `expr` at `size` points, float64; `env` maps each Symbol to a
    tensor of `size` values (or a 0-d tensor). Evaluated in chunks of CHUNK points."""
    if size <= CHUNK:
        return _Evaluator(env, size).value(expr)
    parts = []
    for start in range(0, size, CHUNK):
        stop = min(start + CHUNK, size)
        chunk = {s: (v[start:stop] if v.dim() else v) for s, v in env.items()}
        parts.append(_Evaluator(chunk, stop - start).value(expr))
    return torch.cat(parts)


class _Evaluator:
    """One walk over a sympy tree with torch; repeated subtrees are computed once."""

    def __init__(self, env: Mapping[Any, torch.Tensor], size: int) -> None:
        self.env = env
        self.size = size
        self.cache: dict[Any, Any] = {}

    def value(self, expr: Any) -> torch.Tensor:
        result = self.eval(expr)
        return _full(result, self.size)

    def eval(self, expr: Any) -> Any:
        cached = self.cache.get(expr)
        if cached is None:
            cached = self.cache[expr] = self._eval(expr)
        return cached

    def _eval(self, expr: Any) -> Any:
        import sympy

        if expr.is_Symbol:
            try:
                return self.env[expr].to(torch.float64)
            except KeyError:
                raise Unsupported(f"the symbol {expr} has no value") from None
        if isinstance(expr, sympy.logic.boolalg.BooleanAtom):
            return torch.tensor(bool(expr))
        if not expr.free_symbols:
            return torch.tensor(_number(expr), dtype=torch.float64)
        if expr.is_Add:
            return _fold(torch.add, [self.eval(a) for a in expr.args])
        if expr.is_Mul:
            return _fold(torch.mul, [self.eval(a) for a in expr.args])
        if expr.is_Pow:
            return self._pow(expr.base, expr.exp)
        if isinstance(expr, sympy.Piecewise):
            return self._piecewise(expr)
        function = _functions().get(expr.func)
        if function is None:
            raise Unsupported(f"no torch meaning for the sympy function {expr.func.__name__}")
        return function(*(self.eval(a) for a in expr.args))

    def _pow(self, base: Any, exponent: Any) -> Any:
        import sympy

        b = self.eval(base)
        if exponent == sympy.Rational(1, 2):
            return torch.sqrt(b)
        if exponent == sympy.Rational(-1, 2):
            return torch.rsqrt(b)
        if exponent == -1:
            return torch.reciprocal(b)
        if exponent.is_Integer:
            return torch.pow(b, int(exponent))
        if not exponent.free_symbols:
            return torch.pow(b, _number(exponent))
        return torch.pow(b, self.eval(exponent))

    def _piecewise(self, expr: Any) -> Any:
        # Conditions are tried in order: build the selection from the last piece backwards.
        pieces = list(expr.args)
        result = _full(self.eval(pieces[-1].expr), self.size)
        if pieces[-1].cond != True:  # noqa: E712 - sympy's true, not Python's
            result = torch.where(self.eval(pieces[-1].cond), result, torch.nan)
        for piece in reversed(pieces[:-1]):
            result = torch.where(self.eval(piece.cond), self.eval(piece.expr), result)
        return result


def _fold(fn: Callable[[Any, Any], Any], values: list[Any]) -> Any:
    result = values[0]
    for value in values[1:]:
        result = fn(result, value)
    return result


def _full(value: Any, size: int) -> torch.Tensor:
    value = torch.as_tensor(value, dtype=torch.float64)
    return value.expand(size).contiguous() if value.dim() == 0 else value


def _number(expr: Any) -> float:
    try:
        return float(expr.evalf(30))
    except (OverflowError, TypeError):
        # Beyond float range (exp(1000)) or not real: what float64 arithmetic would give.
        value = complex(expr.evalf(30))
        return value.real if value.imag == 0 else float("nan")


def _heaviside(a: torch.Tensor, half: Any = 0.5) -> torch.Tensor:
    return torch.heaviside(a, torch.as_tensor(half, dtype=a.dtype).expand_as(a))


_TABLE: dict[Any, Callable[..., Any]] = {}


def _functions() -> dict[Any, Callable[..., Any]]:
    """sympy function class -> torch callable (built once, on first use)."""
    if _TABLE:
        return _TABLE
    import sympy as sp

    def compare(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        return lambda a, b: fn(torch.as_tensor(a), torch.as_tensor(b))

    _TABLE.update({
        sp.exp: torch.exp, sp.log: torch.log, sp.sin: torch.sin, sp.cos: torch.cos,
        sp.tan: torch.tan, sp.asin: torch.asin, sp.acos: torch.acos, sp.atan: torch.atan,
        sp.sinh: torch.sinh, sp.cosh: torch.cosh, sp.tanh: torch.tanh, sp.asinh: torch.asinh,
        sp.acosh: torch.acosh, sp.atanh: torch.atanh,
        sp.sec: lambda a: 1 / torch.cos(a), sp.csc: lambda a: 1 / torch.sin(a),
        sp.cot: lambda a: 1 / torch.tan(a), sp.sech: lambda a: 1 / torch.cosh(a),
        sp.csch: lambda a: 1 / torch.sinh(a), sp.coth: lambda a: 1 / torch.tanh(a),
        sp.erf: torch.special.erf, sp.erfc: torch.special.erfc,
        sp.Abs: torch.abs, sp.sign: torch.sign, sp.Heaviside: _heaviside,
        sp.DiracDelta: lambda a, *k: torch.zeros_like(torch.as_tensor(a, dtype=torch.float64)),
        sp.Max: lambda *a: _fold(torch.maximum, [torch.as_tensor(v) for v in a]),
        sp.Min: lambda *a: _fold(torch.minimum, [torch.as_tensor(v) for v in a]),
        sp.StrictGreaterThan: compare(torch.gt), sp.GreaterThan: compare(torch.ge),
        sp.StrictLessThan: compare(torch.lt), sp.LessThan: compare(torch.le),
        sp.Equality: compare(torch.eq), sp.Unequality: compare(torch.ne),
        sp.And: lambda *a: _fold(torch.logical_and, list(a)),
        sp.Or: lambda *a: _fold(torch.logical_or, list(a)),
        sp.Not: torch.logical_not,
        sp.ITE: lambda c, a, b: torch.where(torch.as_tensor(c), torch.as_tensor(a), torch.as_tensor(b)),
    })
    return _TABLE
