"""A leaf's composed gradient against sympy's own derivative of the whole expression.

The composition is a chain of one-operation definitions; expanded into the variables alone
it can grow exponentially (the doubling DAG: 2^40 terms), so its size is counted first, on
the definitions, and only formulas below EXPAND_MAX operations are expanded, differentiated
by sympy and simplified. Where simplify does not reach 0 within its budget the two are
compared numerically, at the traced values and at random points near them, and said so.
"""

from __future__ import annotations

from typing import Any

from .. import words

#: Formulas larger than this (operations, expanded) stay in named values.
EXPAND_MAX = 400
#: Seconds for sympy's derivative of the whole expression, and for simplify, per leaf.
DIFF_BUDGET = 10.0
SIMPLIFY_BUDGET = 2.0
#: Random points near the traced values for a numeric comparison.
RANDOM_POINTS = 3


def sizes(definitions: dict[Any, Any]) -> dict[Any, int]:
    """Each named value's size once expanded into the variables, counted without expanding."""
    found: dict[Any, int] = {}
    for symbol, formula in definitions.items():
        found[symbol] = size(formula, found)
    return found


def size(expr: Any, known: dict[Any, int]) -> int:
    import sympy

    total = 0
    for item in sympy.preorder_traversal(expr):
        total += known.get(item, 1) if item.is_Symbol else 1
    return total


def expand(expr: Any, definitions: dict[Any, Any], known: dict[Any, int]) -> Any | None:
    """`expr` in the variables only, or None when it would pass EXPAND_MAX operations."""
    if size(expr, known) > EXPAND_MAX:
        return None
    full: dict[Any, Any] = {}
    for symbol, formula in definitions.items():
        if known[symbol] <= EXPAND_MAX:
            full[symbol] = formula.xreplace(full)
    return expr.xreplace(full)


def reference(prepared: Any, plan: Any, symbols: dict[str, Any], seed: Any, factor: Any, elements: bool) -> dict[str, Any] | str:
    """sympy's derivative of the whole expression, times the starting gradient, per variable
    (an array per variable); a sentence saying why not when it could not be taken."""
    import numpy as np
    import sympy

    from ..interpret.to_sympy import to_sympy
    from ..exact.symbolic import SymbolicTimeout, within

    program = plan.body if plan.mode == "reduced" else plan.program
    values = {name: (array if elements else array.item()) for name, array in symbols.items()}

    def work() -> dict[str, Any]:
        output = np.asarray(to_sympy(program, values, library=prepared.library), dtype=object)
        found = {}
        for name in program.variables:
            array = symbols[name]
            if not any(isinstance(v, sympy.Symbol) for v in np.asarray(array, dtype=object).flat):
                continue  # integer data (labels, an index), written as its numbers
            grads = np.empty(array.shape, dtype=object)
            for index in np.ndindex(*array.shape):
                variable = array[index]
                total = sympy.Integer(0)
                for out, g in zip(output.flat, np.broadcast_to(seed, output.shape).flat):
                    total += g * sympy.diff(out, variable)
                grads[index] = factor * total
            found[name] = grads
        return found

    try:
        return within(DIFF_BUDGET, work)
    except SymbolicTimeout:
        return f"sympy's derivative took longer than {DIFF_BUDGET:g} s"


def prove(composed: Any, expected: Any, numeric: Any) -> tuple[str, str]:
    """(kind, words): simplify to 0, else `numeric()` -> (agrees, points) is asked."""
    import sympy

    from ..exact.symbolic import SymbolicTimeout, within

    why = "the composed gradient is too long to expand"
    if composed is not None:
        differences = [sympy.expand(c - e) for c, e in zip(composed.flat, expected.flat)]
        try:
            if within(SIMPLIFY_BUDGET, lambda: all(sympy.simplify(d) == 0 for d in differences)):
                return "simplify", words.proof_words("simplify")
            why = "simplify did not reduce the difference to 0"
        except SymbolicTimeout:
            why = f"simplify took longer than {SIMPLIFY_BUDGET:g} s"
    agrees, points = numeric()
    if agrees:
        return "numeric", words.proof_words("numeric", points=points, why=why)
    return "differs", words.proof_words("differs", why=f"{why}, and the two differ numerically")
