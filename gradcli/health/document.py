"""The grads report's JSON document (docs/json.md) as plain data: `GradsResult.as_dict()`.

render/trace_json.py writes it (one line per parameter and per module; non-finite numbers
as the strings "nan", "inf", "-inf", as in trace's document).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ..words import problem_sentences
from .table import grads_rows

if TYPE_CHECKING:
    from .result import Finding, GradsResult, ParamHealth


def source_data(source: Any) -> dict[str, Any] | None:
    return None if source is None else {"file": source.file, "line": source.line, "code": source.code}


def finding_data(finding: Finding) -> dict[str, Any]:
    return {"flag": finding.flag, "reason": finding.reason, "source": source_data(finding.source)}


def parameter_data(p: ParamHealth) -> dict[str, Any]:
    return {
        "name": p.name, "module": p.module, "module_type": p.module_type, "shape": list(p.shape),
        "numel": p.numel, "frozen": p.frozen, "order": p.order, "param_norm": p.param_norm,
        "reference_norm": p.reference_norm,
        "grad_norm": p.grad_norm, "ratio": p.ratio, "max_abs": p.max_abs, "mean_abs": p.mean_abs,
        "zero_share": p.zero_share, "flags": p.flags, "findings": [finding_data(f) for f in p.findings],
        "steps": p.steps or [],
    }


def grads_document(result: GradsResult, depth: int | None = None) -> dict[str, Any]:
    origin = result.origin
    return {
        "target": result.target,
        "found": result.found,
        "seed": result.seed,
        "model": result.model,
        "loss": result.loss,
        "ok": result.ok,
        "strict": result.strict,
        "thresholds": asdict(result.thresholds),
        "median_ratio": result.median_ratio,
        "parameters": [parameter_data(p) for p in result.params],
        "modules": [
            {
                "path": row.path, "type": result.module_types.get(row.path, ""), "numel": row.numel,
                "grad_norm": row.grad_norm, "ratio": row.ratio, "max_abs": row.max_abs, "mean_abs": row.mean_abs,
                "zero_share": row.zero_share, "flags": row.findings or [], "steps": row.steps or [],
            }
            for row in grads_rows(result, depth) if row.level == 0
        ],
        "nonfinite_origin": None if origin is None else {
            "forward_op": origin.forward_op, "forward_source": source_data(origin.forward_source),
            "forward_in_loss": origin.forward_in_loss, "backward_node": origin.backward_node,
            "backward_source": source_data(origin.backward_source), "backward_in_loss": origin.backward_in_loss,
        },
        "steps": None if result.steps is None else {
            "count": result.steps.count, "lr": result.steps.lr, "losses": result.steps.losses,
        },
        "error": result.error,
        "problems": problem_sentences(result.problems),
        "warnings": result.warnings,
        "notes": result.notes,
    }
