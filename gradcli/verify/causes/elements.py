"""Causes in check's exact mode: softmax, matmul and reductions over a dim, element by element.

There a check's "points" are the elements of small tensors, every one in the same call, and
one derivative element depends on all of them: an exp that overflows at x[0] makes the
gradient of every element nan through the sum it feeds. So the evidence is gathered once,
on the whole tensors (graph/evidence.py, as for a user's model), with the output weighted
as the check weighted it (L = sum(w*y), exact/coupled.py), and read by the same node-level
reasoning as the elementwise mode (verify/causes/nodes.py). Which elements are wrong, and
which are truly undefined (sympy and mpmath both asked), is decided per element exactly as
verify/causes/at_points.py decides it per point.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ...graph.evidence import gather
from .cause import Cause
from .at_points import POINTS_SHOWN, classify, witnessed_undefined
from ...exact.coupled import weights
from .nodes import NodeReasoning


class ElementWords:
    """How elements are named in a cause: `x[0]=1000`, ranges per variable."""

    def __init__(self, target: Any, values: Mapping[str, torch.Tensor], variable: str) -> None:
        self.target = target
        self.flat = values[variable].detach().to(torch.float64).reshape(-1)
        self.variable = variable

    def element(self, i: int) -> str:
        return str(self.target.point(i)["element"])

    def value(self, i: int) -> float:
        # a second-derivative entry i is the pair (row, column): the row's element's value
        return float(self.flat[i // max(1, self.target.reference.numel() // self.flat.numel())])

    def label(self, i: int) -> str:
        if self.target.reference.numel() != self.flat.numel():  # a pair: its values are in `where`
            return self.element(i)
        return f"{self.element(i)} = {self.value(i):.6g}"

    def where(self, index: torch.Tensor) -> dict[str, list[float]]:
        values = [self.value(i) for i in index.tolist()]
        return {self.variable: [min(values), max(values)]}

    def example(self, i: int) -> dict[str, Any]:
        return {"element": self.element(i), self.variable: self.value(i)}


def find_element_causes(
    program: Any, library: Any, values: Mapping[str, torch.Tensor], autograd: Mapping[Any, torch.Tensor],
    targets: Mapping[Any, Any], *, dtype: torch.dtype, rtol: float, atol: float, source: str,
) -> list[Cause]:
    """The causes of every wrong or undefined-and-not-finite group of elements."""
    largest = float(torch.finfo(dtype).max)
    found: list[Cause] = []
    evidence = None
    for key, target in targets.items():
        name = key if isinstance(key, str) else ",".join(key)
        words = ElementWords(target, values, key if isinstance(key, str) else key[0])
        got = autograd[key].to(torch.float64).reshape(-1)
        bad, exact, undefined = classify(got, target, rtol=rtol, atol=atol, largest=largest, outside=None)
        if bool(undefined.any()):
            cause, bad = witnessed_undefined(name, undefined.nonzero().flatten(), bad, exact, got, target, largest,
                                             words)
            found += [cause] if cause is not None else []
        if not bad.numel():
            continue
        if evidence is None:
            evidence = _evidence(program, library, values, dtype)
        nonfinite = ~torch.isfinite(got[bad])
        for group, is_nan in ((bad[nonfinite], True), (bad[~nonfinite], False)):
            if not group.numel():
                continue
            finder = NodeReasoning(evidence, None, source, exact_known=True)
            cause = finder.nonfinite() if is_nan else finder.finite(got[group], [exact[i] for i in group.tolist()])
            cause.derivative, cause.points = name, int(group.numel())
            cause.where = words.where(group)
            elements = ", ".join(words.label(i) for i in group[:POINTS_SHOWN].tolist())
            more = f" and {group.numel() - POINTS_SHOWN:,} more" if group.numel() > POINTS_SHOWN else ""
            cause.summary += f" (the elements {elements}{more})"
            cause.examples = [{**words.example(i), "autograd": float(got[i]), "exact": exact[i]}
                              for i in group[:POINTS_SHOWN].tolist()]
            found.append(cause)
    return found


def _evidence(program: Any, library: Any, values: Mapping[str, torch.Tensor], dtype: torch.dtype) -> Any:
    """Every node of the program on the whole tensors, backward from L = sum(w*y) as checked."""
    from ...interpret.to_torch import build

    leaves = {n: v.detach().to(dtype).clone().requires_grad_(True) for n, v in values.items()}

    def run() -> torch.Tensor:
        out = build(program, leaves, library=library).output
        w = torch.tensor([float(v) for v in weights(out.numel())], dtype=out.dtype).reshape(out.shape)
        return (out * w).sum()

    return gather(run, leaves)
