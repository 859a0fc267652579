"""Exact checks of small tensors: one sympy symbol per element.

Operations that couple elements (softmax, matmul, a reduction over a dim) have no
elementwise derivative, but on a few elements sympy can write the whole function out. The
output is projected onto fixed weights w (1, 1 + 1/M, 1 + 2/M, ... with M a power of two,
so they are exact in every float format): L = sum(w * y). Then the gradient of L (one
vector-Jacobian product with distinct weights, which catches a mix-up between outputs) and
with --order 2 its Hessian, including the mixed partials across variables, are compared
element by element with sympy's derivatives of the same L.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from ..interpret.to_sympy import to_sympy
from ..interpret.to_torch import build
from ..language.library import Library
from .arbitrate import UNDEFINED, exact_function
from .compare import Target
from .regions import regions
from .symbolic import SYMBOLIC_BUDGET, evaluate, tame, within
from .undefined import decide


@dataclass
class ExactFormulas:
    function: Any  # L
    first: dict[str, list[Any]]  # name -> derivative of L per element (flattened)
    second: dict[tuple[str, str], list[Any]]  # (a, b) -> Hessian block, row-major
    symbols: dict[str, list[Any]]  # name -> symbols per element (flattened)
    labels: dict[str, list[str]]  # name -> "x[0, 1]" per element


def weights(count: int) -> list[Any]:
    import sympy

    if count == 1:
        return [sympy.Integer(1)]
    scale = 1 << (count - 1).bit_length()
    return [1 + sympy.Rational(k, scale) for k in range(count)]


def _labels(name: str, shape: tuple[int, ...]) -> list[str]:
    if not shape:
        return [name]
    return [f"{name}[{', '.join(map(str, idx))}]" for idx in itertools.product(*(range(s) for s in shape))]


def exact_formulas(program: Any, library: Library, shapes: dict[str, tuple[int, ...]], order: int) -> ExactFormulas:
    import sympy

    labels = {name: _labels(name, shape) for name, shape in shapes.items()}
    symbols = {name: [sympy.Symbol(label, real=True) for label in labels[name]] for name in shapes}

    def work() -> ExactFormulas:
        arrays = {}
        for name, shape in shapes.items():
            array = np.empty(len(symbols[name]), dtype=object)
            array[:] = symbols[name]
            arrays[name] = array.reshape(shape) if shape else array.reshape(())
        output = np.asarray(to_sympy(program, arrays, library=library), dtype=object).reshape(-1)
        loss = sympy.Add(*(w * y for w, y in zip(weights(output.size), output)))
        first = {name: [tame(sympy.diff(loss, s)) for s in symbols[name]] for name in shapes}
        second = {}
        if order == 2:
            names = list(shapes)
            for i, a in enumerate(names):
                for b in names[i:]:
                    second[(a, b)] = [tame(sympy.diff(d, s)) for d in first[a] for s in symbols[b]]
        return ExactFormulas(loss, first, second, symbols, labels)

    return within(SYMBOLIC_BUDGET, work)


def exact_targets(
    forms: ExactFormulas, values: dict[str, torch.Tensor], defined: Callable[[], bool] | None = None,
) -> dict[Any, Target]:
    """A Target per variable (and per pair with --order 2): its elements are the points.

    `defined()`, when given, decides at 50 digits whether the program is defined at the
    values; it is asked only when the float64 walk says it is not (see `_confirmed`)."""
    env = {}
    for name, syms in forms.symbols.items():
        flat = values[name].detach().to(torch.float64).reshape(-1)
        env.update({s: flat[k] for k, s in enumerate(syms)})
    outside = bool(regions(forms.function, [], env, 1)[0].any())
    if outside and defined is not None:
        outside = not defined()
    all_symbols = [s for syms in forms.symbols.values() for s in syms]
    args = [env[s].item() for s in all_symbols]
    found: dict[Any, Target] = {}
    for key, exprs in [*forms.first.items(), *forms.second.items()]:
        # A kink counts for a partial derivative only if its condition moves with that
        # element: at a kink of x[4], d/dx[0] is still taken along x[0] alone.
        if isinstance(key, str):
            labels = forms.labels[key]
            wrt = [{s} for s in forms.symbols[key]]
        else:
            labels = [f"{p},{q}" for p in forms.labels[key[0]] for q in forms.labels[key[1]]]
            wrt = [{p, q} for p in forms.symbols[key[0]] for q in forms.symbols[key[1]]]
        masks = [regions(None, [e], env, 1, w) for e, w in zip(exprs, wrt)]
        found[key] = Target(
            name=key if isinstance(key, str) else ",".join(key),
            reference=torch.cat([evaluate(e, env, 1) for e in exprs]),
            undefined=torch.tensor([outside or (bool(m[0]) and _confirmed(e, all_symbols, args, defined))
                                    for e, m in zip(exprs, masks)]),
            kink=torch.tensor([bool(m[1]) for m in masks]),
            exact=lambda idx, exprs=exprs: [exact_function(exprs[i], all_symbols)(*args) for i in idx],
            point=lambda i, labels=labels: {"element": labels[i]},
            near=torch.tensor([bool(m[2]) for m in masks]),
            witnesses=lambda i, largest, exprs=exprs: decide(forms.function, exprs[i], all_symbols, args, largest),
        )
    return found


def _confirmed(expr: Any, symbols: list[Any], args: list[float], defined: Callable[[], bool] | None) -> bool:
    """Whether a derivative the float64 walk calls undefined is undefined at 50 digits too.

    The float64 walk misreads underflow as a domain edge: in log(softmax(x)) at x = -1000,
    exp(-1000) is 0.0 and the log looks undefined, though every value and derivative is
    finite. Without `defined` (no exact evaluation of the program asked for) the float64
    verdict stands, as before."""
    if defined is None:
        return True
    return exact_function(expr, symbols)(*args) is UNDEFINED


def exact_autograd(program: Any, library: Library, leaves: dict[str, torch.Tensor], order: int) -> dict[Any, torch.Tensor]:
    """autograd's gradient of L = sum(w*y) per element, and with order 2 its Hessian blocks."""
    out = build(program, leaves, library=library).output
    names = list(leaves)
    zeros = {name: torch.zeros(t.numel(), dtype=t.dtype) for name, t in leaves.items()}
    found: dict[Any, torch.Tensor] = {}
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        found.update(zeros)
        if order == 2:
            for i, a in enumerate(names):
                for b in names[i:]:
                    found[(a, b)] = torch.zeros(zeros[a].numel() * zeros[b].numel(), dtype=zeros[a].dtype)
        return found
    w = torch.tensor([float(v) for v in weights(out.numel())], dtype=out.dtype).reshape(out.shape)
    loss = (out * w).sum()
    grads = torch.autograd.grad(loss, [leaves[n] for n in names], allow_unused=True, create_graph=order == 2)
    flat = {n: (g.reshape(-1) if g is not None else zeros[n]) for n, g in zip(names, grads)}
    found.update({n: g.detach() for n, g in flat.items()})
    if order == 2:
        for i, a in enumerate(names):
            for b in names[i:]:
                rows = []
                for k in range(flat[a].numel()):
                    g = flat[a][k]
                    h = None
                    if g.requires_grad:
                        (h,) = torch.autograd.grad(g, leaves[b], retain_graph=True, allow_unused=True)
                    rows.append(h.reshape(-1) if h is not None else zeros[b])
                found[(a, b)] = torch.cat(rows).detach()
    return found
