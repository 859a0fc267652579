"""Formula arrays as the text and LaTeX the result carries, and sums of path terms."""

from __future__ import annotations

from typing import Any

from .result import Formula


def formula(sp: Any, np: Any, array: Any) -> Formula:
    """A 0-d array as its one expression; an n-d array as a sympy Array."""
    array = np.asarray(array, dtype=object)
    expr = array.item() if array.ndim == 0 else sp.Array(array.tolist())
    return Formula(str(expr), sp.latex(expr))


def total(np: Any, terms: list[Any]) -> Any:
    """The sum of the terms that reach a value by different paths."""
    found = terms[0]
    for term in terms[1:]:
        found = found + term
    return np.asarray(found, dtype=object)


def text_of(array: Any) -> str:
    """A value's name: `h`, or `h[:,:]` for one symbol per element (h_0_0, h_0_1, ...)."""
    if array is None:
        return "?"
    if array.ndim == 0:
        return str(array.item())
    first = str(next(iter(array.flat)))
    return first.rsplit("_", array.ndim)[0] + "[" + ",".join(":" for _ in array.shape) + "]"
