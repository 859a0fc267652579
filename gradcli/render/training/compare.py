"""`gradcli compare` for people: the header, the per-parameter table grouped by module, the
GradScaler's steps, where the difference starts, why (causes), and the verdict.

Renderer contract: a CompareResult in, lines out (`compare_lines`, plain strings with a style
each, used by the text format and by `str(result)`). Every word about a comparison is here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...comparison.gradients import severity

if TYPE_CHECKING:
    from ...comparison.result import Cause, CompareResult, Divergence

HEADERS = ("module / parameter", "rel err", "max |err|", "tolerance", "zeros", "flags")


def number(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str) or not math.isfinite(value):
        return str(value)
    return "0" if value == 0 else f"{value:.2e}"


def compare_rows(result: CompareResult) -> list[tuple[int, str, list[str], str]]:
    """(level, path, cells, flags) per line of the table: a module, then its parameters, in
    the order the reference listed them (grouped by module as grads groups them)."""
    groups: dict[str, list[Any]] = {}
    for p in result.parameters:
        groups.setdefault(result.modules.get(p.name, ""), []).append(p)
    rows = []
    for path, params in groups.items():
        kind = result.module_types.get(path, "")
        worst = max((p.rel_err for p in params if p.rel_err is not None), default=None)
        flags = sorted({f.value for p in params for f in p.flags}, key=severity)
        shown = [f for f in flags if f != "AGREES"] or ["AGREES"]
        rows.append((0, path, [f"{path or '(model)'} ({kind})", number(worst), "", "", "", ", ".join(shown)], ", ".join(shown)))
        for p in params:
            leaf = p.name[len(path) + 1:] if path else p.name
            zeros = f"{p.zero_share:.1%}" if p.zero_share else ("" if not p.nonfinite_share else f"{p.nonfinite_share:.1%} nan/inf")
            flags_p = ", ".join(f.value for f in p.flags)
            rows.append((1, p.name, ["  " + leaf, number(p.rel_err), number(p.max_abs_err), number(p.tolerance), zeros, flags_p], flags_p))
    return rows


def compare_lines(result: CompareResult) -> list[tuple[str, str]]:
    """The report as (text, style) lines."""
    out: list[tuple[str, str]] = []
    if result.target:
        out.append((f"{result.target}: {result.found}; seed {result.seed}", ""))
    s = result.setup
    out.append((f"candidate: {s.describe()}   reference: eager {s.reference}", "bold"))
    out.append((f"loss: reference {result.reference_loss:.6g}, candidate {result.candidate_loss:.6g}", ""))
    out.append(("", ""))
    rows = compare_rows(result)
    widths = [max(len(h), *(len(cells[k]) for _, _, cells, _ in rows)) for k, h in enumerate(HEADERS)]
    out.append(("  ".join(h.ljust(w) if k == 0 else h.rjust(w) for k, (h, w) in enumerate(zip(HEADERS, widths))).rstrip(), "bold"))
    for level, _, cells, flags in rows:
        text = "  ".join(c.ljust(w) if k in (0, 5) else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths))).rstrip()
        out.append((text, ("bold " if level == 0 else "") + _style(flags)))
    if result.scaler_steps:
        out += [("", ""), ("GradScaler: " + ", ".join(
            f"scale {st.scale:g} " + ("skipped (non-finite gradients, scale backed off)" if st.skipped else "used")
            for st in result.scaler_steps), "")]
    if result.first_divergence is not None:
        out += [("", ""), ("Where it starts: " + divergence_text(result.first_divergence), "yellow")]
    if result.causes:
        out += [("", ""), ("Why:", "bold")]
        out += [(f"  {cause_text(c, result)}", "") for c in result.causes]
    for note in result.notes:
        out.append((f"note: {note}", "dim"))
    out += [("", ""), (verdict(result), "bold green" if result.ok else "bold red")]
    return out


def divergence_text(d: Divergence) -> str:
    where = f"{d.module} ({d.module_class})"
    if d.file and d.line:
        where += f", {d.file}:{d.line}" + (f"  {d.code}" if d.code else "")
    text = f"{where}: its gradient is off by {number(d.grad_rel_err)} (tolerance {number(d.tolerance)})"
    if d.forward_differs:
        text += f"; its forward output already differed ({number(d.forward_rel_err)}): a forward divergence"
        if d.first_forward and d.first_forward != d.module:
            text += f", first at {d.first_forward}"
    else:
        text += "; its forward output agreed" + (f" ({number(d.forward_rel_err)})" if d.forward_rel_err is not None else "")
        text += ": the difference arises in backward"
    return text


def cause_text(cause: Cause, result: CompareResult) -> str:
    d = cause.detail
    if cause.kind == "random-ops":
        modules = ", ".join(d["modules"]) or "a random op in forward"
        text = (f"random ops ({modules}): both runs started from the same generator state, yet the reference itself "
                f"moves by {number(d['reseeded_reference_rel_err'])} when reseeded, so forward draws random numbers; ")
        if d["eval_agrees"]:
            return text + (f"in eval mode the candidate agrees (worst {number(d['eval_worst_rel_err'])}): it draws its "
                           "own random numbers (inductor does), and its arithmetic is sound")
        return text + f"in eval mode the candidate still differs (worst {number(d['eval_worst_rel_err'])}): not the draws alone"
    if cause.kind == "underflow":
        text = "precision: float16 flushed gradients to zero"
        if d["parameters"]:
            text += f" ({', '.join(d['parameters'])})"
        text += f"; the smallest lost was {number(d['smallest_lost'])}, below float16's smallest normal {number(d['smallest_normal'])}"
        text += f"; a loss scale of {d['scale']:g} would keep it"
        text += "" if d["scale_fits"] else f", but would overflow the largest gradient ({number(d['largest'])})"
        if d["loss_dtype"] == "float16" and d["scale"] > 65504:
            text += " once the loss is float32 (your loss is float16, which cannot hold a scale above 65504: loss.float())"
        if d["scaler_scale"] is not None:
            text += f" (GradScaler settled on {d['scaler_scale']:g}: give it init_scale={d['scale']:g})"
        else:
            text += " (a GradScaler does this: --scaler)"
        return text
    if cause.kind == "amplified":
        return (f"precision, amplified: the gradient entering {d['module']} agreed ({number(d['output_grad_rel_err'])}) and "
                f"the one leaving it is {d['factor']:.0f}x further off ({number(d['input_grad_rel_err'])}): its backward "
                "subtracts nearly equal numbers (BatchNorm over few values per channel does), which multiplies the rounding")
    if cause.kind == "bfloat16-reduction":
        names = ", ".join(f"{p['name']} (n={p['reduction']}, {number(p['rel_err'])} <= {number(p['bound'])})" for p in d["parameters"])
        return f"precision: bfloat16's 8-bit mantissa over a long reduction: the error is within u·n, rounding in every term: {names}"
    if cause.kind == "graph-breaks":
        reasons = "; ".join(d["reasons"][:5])
        return f"graph breaks: torch._dynamo.explain finds {d['graphs']} graphs, {d['breaks']} breaks: {reasons}"
    if cause.kind == "capture":
        hooks = f" (hooks on: {', '.join(d['hooks'])})" if d["hooks"] else ""
        return (f"capture: dynamo's eager backend (the captured graph, no compiler) differs too "
                f"({number(d['eager_backend_rel_err'])}): a hook or Python side effect the compiled graph did not replay{hooks}")
    if cause.kind == "scaler-gave-up":
        return f"GradScaler skipped all {d['steps']} steps, down to scale {d['scale']:g}: the gradients are non-finite at every scale"
    return cause.kind


def verdict(result: CompareResult) -> str:
    total = len(result.parameters)
    if result.ok:
        return f"AGREES: all {total} parameters within tolerance of the reference"
    loss = (f"the loss: candidate {result.candidate_loss:.6g}, reference {result.reference_loss:.6g}"
            if result.loss_disagrees else "")
    bad = [p for p in result.parameters if not p.agrees]
    if not bad:
        return f"DIFFERS: {loss}, though all {total} parameters are within tolerance of the reference"
    flags = sorted({f.value for p in bad for f in p.flags}, key=severity)
    return f"DIFFERS: {len(bad)} of {total} parameters ({', '.join(flags)})" + (f"; {loss}" if loss else "")


def compare_text(result: CompareResult) -> str:
    return "\n".join(text for text, _ in compare_lines(result)) + "\n"


def _style(flags: str) -> str:
    if "OVERFLOW" in flags or "MISSING" in flags:
        return "red"
    return "yellow" if ("DIFFERS" in flags or "UNDERFLOW" in flags) else ""
