"""Elementwise checks: one symbol per variable, the formula evaluated on every point.

The variables' values are broadcast against each other and flattened to P points, so
element i of every variable belongs to point i and the gradient of element i depends on
point i alone. autograd gives grad(y, x, ones) per element; for a final sum/mean that is
the body's derivative (over the count, for mean); the symbolic side differentiates the
body once and evaluates the formula on all P points. Second derivatives (and mixed
partials) come from differentiating each first derivative again, on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..interpret.to_sympy import to_sympy
from ..interpret.to_torch import build
from ..errors import DomainError
from ..language.library import Library
from .arbitrate import UNDEFINED, exact_function
from .coordinates import where_ties
from .domain import defined_at, doubtful, forward_nan
from .compare import Target
from .plan import Plan
from .regions import analyse_all
from .symbolic import SYMBOLIC_BUDGET, real_symbols, tame, within


@dataclass
class Formulas:
    """The function and its exact derivatives, keyed by variable name or (name, name)."""

    function: Any
    first: dict[str, Any]
    second: dict[tuple[str, str], Any]
    symbols: dict[str, Any]
    body: Any = None  # the program differentiated, as written (domain.py evaluates it exactly)
    library: Any = None


def formulas(plan: Plan, library: Library, order: int, points: int) -> Formulas:
    """sympy's derivatives of the plan's body (scaled for a final mean), within the budget."""
    import sympy

    names = list(plan.body.variables)
    symbols = real_symbols(names)

    def work() -> Formulas:
        function = sympy.sympify(to_sympy(plan.body, symbols, library=library))
        scale = sympy.Rational(1, points) if plan.reduction == "mean" else sympy.Integer(1)
        first = {name: tame(sympy.diff(function, symbols[name])) * scale for name in names}
        second = {}
        if order == 2:
            for i, a in enumerate(names):
                for b in names[i:]:
                    second[(a, b)] = tame(sympy.diff(first[a], symbols[b]))
        return Formulas(function, first, second, symbols, plan.body, library)

    return within(SYMBOLIC_BUDGET, work)


def pair_name(pair: tuple[str, str]) -> str:
    return ",".join(pair)


def targets(
    forms: Formulas, points: dict[str, torch.Tensor], size: int
) -> tuple[dict[Any, Target], torch.Tensor, torch.Tensor]:
    """A Target per derivative on the float64 `points`; the points where the function itself
    is outside its domain; and those too close to a kink for finite differences."""
    env = {forms.symbols[name]: values for name, values in points.items()}
    near_kink = torch.zeros(size, dtype=torch.bool)
    order = list(forms.symbols)

    def point(i: int) -> dict[str, Any]:
        return {name: points[name][i].item() for name in order}

    exprs = [*forms.first.items(), *forms.second.items()]
    _no_degenerate_function(forms.function)
    outside, analysed, cancel = analyse_all(forms.function, [expr for _, expr in exprs], env, size)
    if forms.body is not None:
        _decide_domain(forms, points, size, outside, [(expr, a[0]) for (_, expr), a in zip(exprs, analysed)])
        ties = where_ties(forms.body, forms.library, points, size)
        for _, kink, near, _ in analysed:
            kink |= ties
            near |= ties
    found: dict[Any, Target] = {}
    for (key, expr), (undefined, kink, near, reference) in zip(exprs, analysed):
        if isinstance(key, str):
            near_kink |= near
        found[key] = Target(
            name=key if isinstance(key, str) else pair_name(key),
            reference=reference,
            undefined=undefined,  # the function's own domain included
            kink=kink,
            exact=_exact_at(expr, forms, points),
            point=point,
            coords=points,
            near=near,
            suspect=cancel,
            witnesses=_witnesses(forms.function, expr, forms, points),
        )
    for key, target in found.items():
        if not isinstance(key, str):
            # Where d/da has a kink, the function is not differentiable in a there, so no
            # second derivative through a exists: sympy's d2/dx2 of sqrt(x**2) is 0 at 0.
            for name in key:
                target.kink = target.kink | found[name].kink
    _compare_smooth_boundaries(forms, points, found)
    return found, outside, near_kink


def _compare_smooth_boundaries(forms: Formulas, points: dict[str, torch.Tensor], found: dict[Any, Target]) -> None:
    """First derivatives only: at a branch boundary where one-sided limits (sympy) and
    one-sided differences (mpmath) show the derivative exists, the point is no kink; it is
    compared with that value (smooth_boundaries.py). Second derivatives keep their kinks."""
    import time

    from .smooth_boundaries import BUDGET, smooth_boundaries

    deadline = time.monotonic() + BUDGET
    for key, target in found.items():
        candidates = target.kink & ~target.undefined
        if not isinstance(key, str) or not bool(candidates.any()):
            continue
        smooth = smooth_boundaries(forms.function, forms.symbols, points, key, candidates, deadline)
        if not smooth:
            continue
        value = {s.index: s.value for s in smooth}
        at = torch.tensor(list(value), dtype=torch.long)
        target.kink = target.kink.clone()
        target.kink[at] = False
        target.reference = target.reference.clone()
        target.reference[at] = torch.tensor(list(value.values()), dtype=torch.float64)
        target.smooth = smooth
        target.exact = _with_values(target.exact, value)


def _with_values(exact: Callable[[list[int]], list[Any]], known: dict[int, float]) -> Callable[[list[int]], list[Any]]:
    """`exact` with the values `known` at their indices: the formula's own branch at a
    boundary is not the derivative there ((exp(x)-1)/x's constant 1 at 0 has slope 0, not 1/2)."""

    def at(indices: list[int]) -> list[Any]:
        rest = [i for i in indices if i not in known]
        computed = dict(zip(rest, exact(rest) if rest else []))
        return [known[i] if i in known else computed[i] for i in indices]

    return at


def _no_degenerate_function(function: Any) -> None:
    """A function infinite or undefined for every value (softplus(x, beta=0) is zoo) has no
    derivative to claim: refused, like a domain that holds no point."""
    import sympy

    if function.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise DomainError(
            f"the function is not finite for any value (sympy gives {sympy.sstr(function)}): "
            "it has no derivative to check",
            hint="a parameter may make it degenerate (e.g. beta=0 divides by zero)",
        )


def _decide_domain(
    forms: Formulas, points: dict[str, torch.Tensor], size: int, outside: torch.Tensor,
    derivatives: list[tuple[Any, torch.Tensor]],
) -> None:
    """Where the float64 evidence about the domain is in doubt, the program decides at 50
    digits, as written (domain.py); the masks are corrected in place. Where the function
    is defined after all, a derivative counts as defined where its own exact value is (the
    slope of sqrt at 0 is not); the comparison then arbitrates its float64 value."""
    nan = forward_nan(forms.body, forms.library, points, size)
    maybe_inside, maybe_outside = doubtful(outside, nan)
    names = list(forms.symbols)
    symbols = [forms.symbols[n] for n in names]
    exact: dict[int, Any] = {}
    for indices, inside in ((maybe_inside, True), (maybe_outside, False)):
        for i in indices:
            args = [points[n][i].item() for n in names]
            defined = defined_at(forms.body, forms.library, dict(zip(names, args)))
            if defined != inside:
                continue  # the float64 verdict stands
            outside[i] = not defined
            for k, (expr, mask) in enumerate(derivatives):
                if not defined:
                    mask[i] = True
                    continue
                if k not in exact:
                    exact[k] = exact_function(expr, symbols)
                mask[i] = exact[k](*args) is UNDEFINED


def _exact_at(expr: Any, forms: Formulas, points: dict[str, torch.Tensor]) -> Callable[[list[int]], list[Any]]:
    names = list(forms.symbols)

    def exact(indices: list[int]) -> list[Any]:
        fn = exact_function(expr, [forms.symbols[n] for n in names])
        idx = torch.tensor(indices, dtype=torch.long)
        columns = [points[n][idx].tolist() for n in names]
        return [fn(*args) for args in zip(*columns)]

    return exact


def _witnesses(function: Any, expr: Any, forms: Formulas, points: dict[str, torch.Tensor]) -> Callable[[int, float], Any]:
    names = list(forms.symbols)

    def at(index: int, largest: float) -> Any:
        from .undefined import decide

        return decide(function, expr, [forms.symbols[n] for n in names], [points[n][index].item() for n in names],
                      largest)

    return at


def autograd(program: Any, library: Library, leaves: dict[str, torch.Tensor], order: int) -> tuple[dict[Any, torch.Tensor], Any]:
    """autograd's first (and second) derivatives per element, keyed like Formulas."""
    built = build(program, leaves, library=library)
    out = built.output
    names = list(leaves)
    zeros: dict[str, torch.Tensor] = {}  # made when a derivative is zero (each is one whole-size tensor)

    def zero(name: str) -> torch.Tensor:
        if name not in zeros:
            zeros[name] = torch.zeros_like(leaves[name])
        return zeros[name]

    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        found: dict[Any, torch.Tensor] = {name: zero(name) for name in names}
        for i, a in enumerate(names):
            for b in names[i:]:
                if order == 2:
                    found[(a, b)] = zero(a)
        return found, out
    grads = torch.autograd.grad(
        out, [leaves[n] for n in names], grad_outputs=_ones_like(out),
        allow_unused=True, create_graph=order == 2,
    )
    found = {name: (g if g is not None else zero(name)) for name, g in zip(names, grads)}
    if order == 2:
        for i, a in enumerate(names):
            g = found[a]
            for b in names[i:]:
                if g.requires_grad:
                    (h,) = torch.autograd.grad(g, leaves[b], _ones_like(g), allow_unused=True, retain_graph=True)
                else:
                    h = None
                found[(a, b)] = (h if h is not None else zero(b)).detach()
    return {k: v.detach() for k, v in found.items()}, out


def _ones_like(tensor: torch.Tensor) -> torch.Tensor:
    """A gradient of ones for `tensor`: one element expanded to its shape (the same values as
    torch.ones_like, without a whole-size tensor: 80 MB of a 10^7-point check's peak)."""
    return torch.ones((), dtype=tensor.dtype, device=tensor.device).expand_as(tensor)
