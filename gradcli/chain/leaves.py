"""Each leaf's gradient: the paths' terms composed, set against sympy's derivative of the
whole expression (proof.py), against what torch accumulated, and with --create-graph, its
own derivative against the second derivative the trace took through the gradient's graph."""

from __future__ import annotations

from typing import Any

from . import numbers, proof
from .compose import Composition
from .forms import formula, total
from .result import Formula, LeafGradient, Numbers

#: Leaf formulas up to this size (expanded) are shown in the variables; longer ones in names.
SHOW_MAX = 80
#: A formula longer than a line is shown with named subexpressions (sympy's cse).
LINE = 100


def leaf_gradients(
    prepared: Any, plan: Any, composition: Composition, arriving: dict[int, list[Any]],
    accumulate: dict[int, str], steps_of: dict[str, Any], env: dict[Any, Any], known: dict[Any, int],
    seconds: dict[str, Any], tolerance: tuple[float, float],
) -> list[LeafGradient]:
    """`arriving` holds the numbers each path brought to each leaf tensor; `seconds` the
    trace's second derivatives by variable (--create-graph), or nothing."""
    import numpy as np
    import sympy as sp

    tensors = prepared.leaves.tensors
    references = expected(sp, prepared, plan, composition, known)
    found = []
    for name, terms in composition.leaf_terms.items():
        if not terms or (not isinstance(references, str) and name not in references):
            continue
        tensor = tensors[name]
        node_id = accumulate.get(id(tensor))
        value = numbers.fitted_sum(arriving.get(id(tensor), []), tuple(tensor.shape))
        seen = steps_of.get(node_id or "")
        torch_value = seen.grad_outputs[0] if seen is not None and seen.grad_outputs else None
        composed = total(np, terms)
        expanded = _expanded(np, composed, composition, known)
        reference = None if isinstance(references, str) else references[name]
        if reference is None:
            kind, said = "none", f"not compared: {references}"
        else:
            kind, said = proof.prove(expanded, reference, lambda c=composed, r=reference: _numeric(c, r, composition, tensors, env))
        small = expanded is not None and max(proof.size(e, {}) for e in expanded.flat) <= SHOW_MAX
        leaf = LeafGradient(
            name, node_id, [formula(sp, np, t) for t in terms], formula(sp, np, composed),
            shown(sp, np, _simplified(np, expanded)) if small else None,
            None if reference is None else shown(sp, np, _simplified(np, reference)), kind, said,
            Numbers(numbers.plain(value), torch_value, numbers.compare(value, torch_value, tolerance)),
        )
        if name in seconds and expanded is not None:
            leaf.second, leaf.second_numbers = _second(
                sp, np, expanded, composition.leaf_symbols[name], env, tensor, seconds[name], tolerance
            )
        found.append(leaf)
    return found


def expected(sp: Any, prepared: Any, plan: Any, composition: Composition, known: dict[Any, int]) -> dict[str, Any] | str:
    outputs = [known[symbol] for step in composition.steps for symbol in step.out.flat]
    if outputs and max(outputs) > proof.EXPAND_MAX:
        return (f"the expression expands to {max(outputs):,} operations (more than {proof.EXPAND_MAX}), "
                "so sympy's derivative of it was not taken")
    factor = sp.Integer(1)
    if plan.mode == "reduced" and plan.reduction == "mean" and composition.steps:
        factor = 1 / sp.Integer(composition.steps[-1].args["__numel__"])
    return proof.reference(prepared, plan, composition.leaf_symbols, composition.seed, factor, composition.elements)


def _expanded(np: Any, composed: Any, composition: Composition, known: dict[Any, int]) -> Any | None:
    items = [proof.expand(e, composition.definitions, known) for e in composed.flat]
    if any(item is None for item in items):
        return None
    return np.asarray(items, dtype=object).reshape(composed.shape)


def _second(
    sp: Any, np: Any, expanded: Any, symbols: Any, env: dict[Any, Any], tensor: Any, seen: Any,
    tolerance: tuple[float, float],
) -> tuple[Any, Numbers]:
    """d/dv sum(gradient), as the trace takes it through the gradient's own graph."""
    derivative = np.empty(symbols.shape, dtype=object)
    for index in np.ndindex(*symbols.shape):
        derivative[index] = sp.diff(sum(expanded.flat, sp.Integer(0)), symbols[index])
    value = numbers.evaluate_array(np.asarray(derivative, dtype=object), env, tuple(tensor.shape))
    return formula(sp, np, _simplified(np, derivative)), Numbers(numbers.plain(value), seen, numbers.compare(value, seen, tolerance))


def _numeric(composed: Any, reference: Any, composition: Composition, tensors: dict[str, Any], env: dict[Any, Any]) -> tuple[bool, int]:
    """Composed (through the named values) and sympy's derivative at the traced values and
    at RANDOM_POINTS points near them: (all agree, random points used)."""
    import torch

    from ..exact.symbolic import evaluate

    generator = torch.Generator().manual_seed(0)
    points = [{name: t.detach().double() for name, t in tensors.items()}]
    for _ in range(proof.RANDOM_POINTS):
        points.append({
            name: t.detach().double() * (1 + 0.1 * (2 * torch.rand(t.shape, generator=generator, dtype=torch.float64) - 1))
            for name, t in tensors.items()
        })
    seed = composition.seed
    for point in points:
        values: dict[Any, Any] = {}
        for name, tensor in point.items():
            numbers.bind(values, composition.leaf_symbols[name], tensor)
        if seed.ndim == 0 and seed.item().is_Symbol:  # v: the starting gradient torch was given
            values[seed.item()] = env[seed.item()]
        for symbol, definition in composition.definitions.items():
            value = evaluate(definition, values, 1)
            scalar = all(values[s].dim() == 0 for s in definition.free_symbols if s in values)
            values[symbol] = value.reshape(()) if scalar else value
        for c, r in zip(composed.flat, reference.flat):
            if not torch.allclose(evaluate(c, values, 1), evaluate(r, values, 1), rtol=1e-7, atol=1e-10, equal_nan=True):
                return False, proof.RANDOM_POINTS
    return True, proof.RANDOM_POINTS


def shown(sp: Any, np: Any, array: Any) -> Any:
    """The formula, or, when longer than a line, its common subexpressions named (s0, s1, ...)."""
    plain = formula(sp, np, array)
    if len(plain.text) <= LINE:
        return plain
    replacements, reduced = sp.cse(list(array.flat), symbols=sp.numbered_symbols("s"))
    if not replacements:
        return plain
    body = formula(sp, np, np.asarray(reduced, dtype=object).reshape(array.shape))
    text = body.text + "  where " + "; ".join(f"{name} = {value}" for name, value in replacements)
    latex = body.latex + r" \quad \text{where } " + r",\ ".join(f"{sp.latex(n)} = {sp.latex(v)}" for n, v in replacements)
    return Formula(text, latex)


def _simplified(np: Any, array: Any) -> Any:
    from ..exact.symbolic import simplify_all

    shown = simplify_all({i: e for i, e in enumerate(array.flat)})
    return np.asarray([shown[i] for i in range(array.size)], dtype=object).reshape(array.shape)
