"""`gradcli memory` for people: the totals, the tables (by module, by line, the largest saved
tensors), the checkpoint trials and the verdict, as plain fixed-width text.

Renderer contract: a MemoryResult in, lines out; `memory_lines` is what the CLI prints and
`str()` of the Python API's result. Every word about a memory result is chosen here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ...footprint.result import KEPT_FOR_BACKWARD
from ...words import byte_size as size

if TYPE_CHECKING:
    from ...footprint.result import MemoryResult

#: The saved tensors the text lists (the JSON has them all).
DEFAULT_TOP = 12
#: A line of the user's code is cut to this many characters in a table.
CODE_WIDTH = 48


def share(part: int, whole: int | None) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def table(headers: Sequence[str], rows: list[Sequence[str]], right: set[int]) -> list[str]:
    """Rows under headers, columns as wide as their widest cell, two spaces apart."""
    cells = [list(headers)] + [list(row) for row in rows]
    widths = [max(len(line[k]) for line in cells) for k in range(len(headers))]
    return [
        "  " + "  ".join(c.rjust(w) if k in right else c.ljust(w) for k, (c, w) in enumerate(zip(line, widths))).rstrip()
        for line in cells
    ]


def _cut(code: str | None) -> str:
    code = code or ""
    return code if len(code) <= CODE_WIDTH else code[: CODE_WIDTH - 1] + "…"


def _place(file: str | None, line: int | None) -> str:
    if not file:
        return "-"
    return f"{file.rsplit('/', 1)[-1]}:{line}"


def _module(path: str | None, cls: str | None) -> str:
    if path is None:
        return "(loss)"
    return f"{path or '(model)'} ({cls})" if cls else (path or "(model)")


def header_lines(result: MemoryResult) -> list[str]:
    kinds = result.by_kind
    parts = [f"{size(kinds.get(k, 0))} {word}" for k, word in (
        ("activation", "activations"), ("cast", "autocast copies of parameters"), ("parameter", "parameters"),
        ("buffer", "buffers"), ("input", "inputs"),
    ) if kinds.get(k)]
    count = len({t.storage for _, t in result.saved()})
    amp = f", autocast {result.amp}" if result.amp else ""
    lines = [
        f"memory {result.model}: {result.dtype} on {result.device}{amp}, loss {result.loss:.4g}" if result.loss is not None
        else f"memory {result.model}: {result.dtype} on {result.device}{amp}",
        "",
        f"Saved for backward: {size(result.saved_bytes)} in {count} storages ({', '.join(parts) or 'nothing'})",
    ]
    if result.peak_bytes is not None:
        lines.append(
            f"Peak during forward + backward: {size(result.peak_bytes)} measured "
            f"({size(result.baseline_bytes)} of parameters, buffers and inputs before forward); "
            f"saved activations are {share(result.kept_bytes, result.peak_bytes)} of it")
    lines.append(f"retain_graph=True would keep {size(result.freed_by_backward)} alive after backward (a plain backward frees it)")
    if result.create_graph_bytes is not None:
        lines.append(f"create_graph=True saves {size(result.create_graph_bytes)} more for the gradient's own graph, "
                     "and keeps the forward's saves as retain_graph does")
    dtypes = result.by_dtype()
    if len(dtypes) > 1 or result.amp:
        lines.append("By dtype: " + ", ".join(f"{dtype} {size(n)}" for dtype, n in sorted(dtypes.items(), key=lambda kv: -kv[1])))
    return lines


def module_lines(result: MemoryResult, depth: int | None) -> list[str]:
    totals = result.by_module(depth)
    rows = [[_module(t.key if t.key != "(loss)" else None, t.label), size(t.kept), size(t.bytes), str(t.tensors),
             share(t.kept, result.kept_bytes)] for t in totals]
    folded = f", modules deeper than {depth} folded" if depth is not None else ""
    return [f"By module (largest first{folded}):", *table(("module", "activations", "all saved", "tensors", "share"), rows, {1, 2, 3, 4})]


def line_lines(result: MemoryResult) -> list[str]:
    rows = [[t.key.rsplit("/", 1)[-1], _cut(t.label), size(t.kept), size(t.bytes), str(t.tensors)] for t in result.by_line()]
    return ["By line of your code (largest first):", *table(("line", "code", "activations", "all saved", "tensors"), rows, {2, 3, 4})]


def tensor_lines(result: MemoryResult, top: int) -> list[str]:
    saved = [(n, t) for n, t in result.saved() if t.first and t.kind in KEPT_FOR_BACKWARD]
    saved.sort(key=lambda pair: -pair[1].bytes)
    rows = []
    for node, t in saved[:top]:
        shared = sum(1 for other in result.nodes for u in other.tensors if u.storage == t.storage) - 1
        kind = t.kind + (f" {t.name}" if t.name else "")
        rows.append([node.node, _module(node.module, node.module_class), "x".join(map(str, t.shape)) or "()", t.dtype,
                     size(t.bytes), kind + (f" (+{shared} node{'s' if shared > 1 else ''})" if shared else ""), _place(node.file, node.line)])
    more = len(saved) - top
    tail = [f"  … and {more} more (--top, or --json for every node)"] if more > 0 else []
    return ["Largest saved activations (each storage once, at the node that saved it first):",
            *table(("node", "module", "shape", "dtype", "bytes", "kind", "line"), rows, {4}), *tail]


def checkpoint_lines(result: MemoryResult) -> list[str]:
    if not result.checkpoint:
        return []
    rows = []
    for c in result.checkpoint:
        grads = "identical" if c.gradients_equal else (f"differ by {c.max_abs_diff:.3g} (rounding)" if c.agrees else f"DIFFER by {c.max_abs_diff:.3g}")
        peak = f"{size(c.peak_before)} -> {size(c.peak_after)}" if c.peak_before is not None else "-"
        what = _module(c.module, c.module_class)
        if c.segments is not None:
            what = f"{what} in {c.segments} segments"
        rows.append([what, size(c.predicted_freed),
                     f"{size(c.saved_bytes_before)} -> {size(c.saved_bytes_after)}", f"{c.time_ratio:.2f}x", peak, grads])
    return [
        "Checkpoint advice (torch.utils.checkpoint, use_reentrant=False), proven by rerunning each:",
        *table(("module", "predicted", "saved activations (measured)", "time", "peak above start", "gradients"), rows, {1, 3}),
    ]


def verdict(result: MemoryResult) -> str:
    if result.error:
        return f"PROBLEM: backward raised: {result.error.splitlines()[0]}"
    bad = [c for c in result.checkpoint if not c.agrees]
    if bad:
        return f"PROBLEM: checkpointing {', '.join(c.module for c in bad)} changed the gradients"
    return f"OK: backward keeps {size(result.kept_bytes)} of activations alive until it runs"


def memory_lines(result: MemoryResult, depth: int | None = None, top: int = DEFAULT_TOP) -> list[str]:
    depth = result.depth if depth is None else depth
    lines = header_lines(result)
    if result.nodes:
        lines += ["", *module_lines(result, depth), "", *line_lines(result), "", *tensor_lines(result, top)]
    check = checkpoint_lines(result)
    if check:
        lines += ["", *check]
    elif result.nodes and not result.error:
        lines += ["", "Checkpoint advice: no module's checkpoint would free saved activations (or --checkpoint 0)"]
    lines += [""] + [f"note: {n}" for n in result.notes] + [verdict(result)]
    return lines


def memory_text(result: Any, depth: int | None = None, top: int = DEFAULT_TOP) -> str:
    return "\n".join(memory_lines(result, depth, top))
