"""Why a parameter got no gradient, or only zeros: the sentence and the line, from what
forward showed (observe.py) and the graph it left, never guessed from names.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..graph.nodes import walk
from .observe import Activation, Cut, ForwardRecord
from .result import Finding, ParamHealth

#: How each kind of cut is named in a sentence.
CUT_WORDS = {
    "no_grad": "it ran under torch.no_grad()",
    "detach": "its output reaches the loss only through .detach()",
    "data": "its output reaches the loss only through .data",
    "numpy": "its output reaches the loss only through a numpy round trip (.detach().numpy())",
    "item": "its output reaches the loss only through {op}() (a Python number)",
    "integer": "its output reaches the loss only through {op}, whose result is an integer tensor",
    "other": "its output reaches the loss only through {op}, whose result has no gradient",
}


def no_grad_findings(params: list[ParamHealth], record: ForwardRecord, ids: dict[int, str]) -> None:
    """A NO GRAD finding, with its cause, on each parameter in `params` (all lack a gradient).

    `ids` maps id(parameter) to its name, to read AccumulateGrad nodes' variables."""
    used = [p for p in params if p.name in record.first_use]
    causes = _first_cuts({p.name for p in used}, record.cuts, ids)
    for param in params:
        if param.name not in record.first_use:
            param.findings.append(Finding("NO GRAD", _unused(param, record)))
            continue
        cut = causes.get(param.name)
        if cut is None:
            param.findings.append(Finding(
                "NO GRAD", "it was used in forward, but nothing computed from it reached the loss",
            ))
            continue
        words = CUT_WORDS[cut.kind].format(op=cut.op)
        where = f" at {cut.source}" if cut.source is not None else ""
        param.findings.append(Finding("NO GRAD", words + where, cut.source))


def _unused(param: ParamHealth, record: ForwardRecord) -> str:
    module = f"`{param.module}` ({param.module_type})" if param.module else f"the model ({param.module_type})"
    if param.module in record.modules:
        return f"its module {module} ran in forward but never used it"
    return f"its module {module} never ran in forward"


def _first_cuts(wanted: set[str], cuts: list[Cut], ids: dict[int, str]) -> dict[str, Cut]:
    """For each wanted parameter, the first cut (in forward order) that had it behind it."""
    found: dict[str, Cut] = {}
    for cut in cuts:
        if len(found) == len(wanted):
            break
        for name in _parameters_behind(cut.inputs, ids, wanted.difference(found)):
            found.setdefault(name, cut)
    return found


def _parameters_behind(roots: Iterable[Any], ids: dict[int, str], wanted: set[str]) -> set[str]:
    """The wanted parameters reachable from `roots` (graph nodes or parameter names)."""
    roots = list(roots)
    found = {root for root in roots if isinstance(root, str) and root in wanted}
    for node in walk([root for root in roots if not isinstance(root, str)]):
        if len(found) == len(wanted):
            break
        variable = getattr(node, "variable", None)
        if variable is not None and ids.get(id(variable)) in wanted:
            found.add(ids[id(variable)])
    return found


def zero_finding(param: ParamHealth, record: ForwardRecord) -> Finding:
    """ZERO, naming the activation that produced the zeros when one did."""
    run = record.modules.get(param.module)
    plain = "every element of its gradient is exactly 0"
    if run is None or run.last is None:
        return Finding("ZERO", plain)
    after = [a for a in record.activations if a.index > run.last]
    stuck = next((a for a in after if a.stuck), None)
    if stuck is not None:
        where = "right after it" if after[0] is stuck else "after it"
        words = f"the {stuck.op} {where} is {stuck.state}, so no gradient comes back"
        return Finding("ZERO", _at(words, stuck), stuck.source)
    before = [a for a in record.activations if a.index < run.first]
    if before and before[-1].zero_output:
        dead = before[-1]
        return Finding("ZERO", _at(f"its input is all zeros, from a dead {dead.op}", dead), dead.source)
    return Finding("ZERO", plain)


def _at(words: str, activation: Activation) -> str:
    return words + (f" at {activation.source}" if activation.source is not None else "")
