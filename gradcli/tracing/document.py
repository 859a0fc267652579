"""The trace's JSON document (docs/json.md) as plain data: `TraceResult.as_dict()`.

render/trace_json.py writes it as text (one line per node, leaf, pass and flow step).
Non-finite numbers are still floats here; the writer turns them into strings.

JSON has no NaN or infinity, and gradients that are nan or inf are exactly what a trace is
for, so non-finite numbers are written as the strings "nan", "inf" and "-inf" (the output
stays valid JSON for every parser; `float("nan")` reads them back in Python).

Beyond the first contract's keys the document carries (every key is in docs/json.md): `root` (the output's grad_fn node), `seed` (null when nothing random was drawn),
per node `span` (where the operation is written) and `same_as`, per saved tensor `shape`,
`dtype`, `numel`, a flat `preview` and `variable` (a saved leaf) or `bound` (a saved
assigned intermediate); per leaf `dtype`, `spec`, `defaulted`, `requires_grad`; per pass
`index`, `grad_fns`, `nonfinite`, `warnings`, and `error` as {type, message (torch's own),
explanation, fix}; per flow step `pass` and `nonfinite`; `intermediates` (assigned names,
their .grad when kept or why it is null), `problems` (what made the exit status 1) and, with
--create-graph, `gradient_graphs` ({of, root, nodes, second: d/dv sum(gradient), note}).
For code targets (model.py:NAME), each node also has `module`, `module_class`, `file`,
`line` and `code`; the document has `target` ({kind, name, found}), `modules` (path, class,
parameters, input and output shapes), with --flow `forward_nonfinite`, and a pass error may
carry `details` (the tensor and lines behind it); leaf values over 10,000 elements are a
summary ({shape, dtype, numel, preview, norm}).
With --symbolic, `symbolic` (the chain rule: docs/json.md lists its keys; render/chain.py draws it).
Each node, leaf, pass and flow step is written on one line.
"""

from __future__ import annotations

from typing import Any

from ..errors import Span
from ..words import problem_sentences


def span_data(span: Span | None) -> dict[str, int] | None:
    if span is None:
        return None
    return {"line": span.line, "col": span.col, "end_line": span.end_line, "end_col": span.end_col}


def node_data(node: Any, code: bool = False) -> dict[str, Any]:
    data = {
        "id": node.id,
        "name": node.name,
        "next": list(node.next),
        "saved": node.saved,
        "variable": node.variable,
        "label": node.label,
        "span": span_data(node.span),
        "same_as": node.same_as,
    }
    if code:
        data.update(origin_data(node.origin))
    return data


def origin_data(origin: Any) -> dict[str, Any]:
    """A code node's module (path from the model, class) and the user's line that made it."""
    if origin is None:
        return {"module": None, "module_class": None, "file": None, "line": None, "code": None}
    return {
        "module": origin.module, "module_class": origin.module_class, "file": origin.file,
        "line": origin.line, "code": origin.code,
    }


def error_data(error: Any) -> dict[str, Any] | None:
    if error is None:
        return None
    data = {"type": error.type, "message": error.message, "explanation": error.explanation, "fix": error.fix}
    if error.details is not None:
        data["details"] = error.details
    return data


def trace_document(result: Any) -> dict[str, Any]:
    """The trace as docs/json.md's document (plain data, non-finite numbers still floats)."""
    code = result.target is not None
    document: dict[str, Any] = {
        "expression": result.expression,
        "result": result.result,
        "root": result.graph.root,
        "nodes": [node_data(node, code) for node in result.graph.nodes],
        "leaves": [
            {
                "name": leaf.name, "shape": leaf.shape, "dtype": leaf.dtype, "spec": leaf.spec,
                "defaulted": leaf.defaulted, "requires_grad": leaf.requires_grad,
                "value": leaf.value, "grad": leaf.grad,
            }
            for leaf in result.leaves
        ],
        "passes": [
            {
                "index": p.index, "mode": p.mode, "retain_graph": p.retain_graph,
                "create_graph": p.create_graph, "grads": p.grads, "grad_fns": p.grad_fns,
                "nonfinite": p.nonfinite, "error": error_data(p.error), "warnings": p.warnings,
            }
            for p in result.passes
        ],
        "intermediates": [
            {"name": i.name, "node": i.node, "retained": i.retained, "grad": i.grad, "note": i.note}
            for i in result.intermediates
        ],
        "seed": result.seed,
        "ok": result.ok,
        "problems": problem_sentences(result.problems),
    }
    if result.flow is not None:
        document["flow"] = [
            {
                "node": step.node, "pass": step.pass_index, "grad_inputs": step.grad_inputs,
                "grad_outputs": step.grad_outputs, "nonfinite": step.nonfinite,
            }
            for step in result.flow
        ]
        document["nonfinite_origin"] = result.nonfinite_origin
        if result.cause is not None:
            document["cause"] = result.cause.as_dict()
        if code:
            document["forward_nonfinite"] = result.forward_nonfinite
    if code:
        document["target"] = result.target
        document["modules"] = result.modules
    if result.symbolic is not None:
        from dataclasses import asdict

        document["symbolic"] = asdict(result.symbolic)
    if result.options.get("create_graph"):
        document["gradient_graphs"] = [
            {
                "of": g.of, "root": g.graph.root, "nodes": [node_data(n, code) for n in g.graph.nodes],
                "second": g.second, "note": g.note,
            }
            for g in result.gradient_graphs
        ]
    return document
