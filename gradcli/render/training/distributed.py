"""`compare --ddp N` / `--fsdp N` and `grads --ddp N` as text: the words for every cause and
problem of a distributed run are chosen here, once (the result holds data only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...distributed.result import Cause, Comparison, DistributedResult


def _num(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    return f"{x:.{digits}e}" if abs(x) < 1e-3 or abs(x) >= 1e4 else f"{x:.{digits + 2}g}"


def heading(result: DistributedResult) -> list[str]:
    wrap = "DDP" if result.wrap == "ddp" else "FSDP2 (fully_shard)"
    lines = [
        f"{result.target}: {result.found}; seed {result.seed}",
        f"{wrap} on {result.world} ranks ({result.backend}), a batch of {result.batch} split {result.batch // result.world} "
        f"per rank as DistributedSampler would, against one process with the whole batch",
    ]
    k = result.accumulate
    if k > 1:
        skip = "no_sync()" if result.wrap == "ddp" else "set_requires_gradient_sync(False)"
        lines.append(f"gradient accumulation: each rank's {result.batch // result.world} samples as {k} micro-batches of "
                     f"{result.batch // result.world // k}, backward after each, the first {k - 1} under {skip}")
    if result.step is not None:
        lines.append(f"after backward, on every rank and on the one process: {result.step}")
    return lines


def table(run: Comparison) -> list[str]:
    head = ("parameter", "numel", "rel err (worst rank)", "spread", "scale", "verdict")
    rows = []
    for r in run.rows:
        if r.no_grad:
            rows.append((r.name, str(r.numel), "-", "-", "-", "no gradient anywhere"))
            continue
        worst = r.worst
        verdict = "AGREES" if r.agrees else "+".join(f.value for f in worst.flags)
        if not r.synced:
            verdict += ", RANKS DIFFER"
        rank = r.per_rank.index(worst)
        rows.append((r.name, str(r.numel), f"{_num(worst.rel_err)} (rank {rank})", _num(r.spread), _num(r.scale, 4), verdict))
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i in (0, 2, 5) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    return [line(head), *(line(row) for row in rows)]


def norm_lines(result: DistributedResult) -> list[str]:
    n = result.first.norms
    same = len(set(n.reduced)) == 1
    reduced = (_num(n.reduced[0], 4) + " on every rank") if same else ", ".join(f"rank {r}: {_num(v, 4)}" for r, v in enumerate(n.reduced))
    lines = [f"grad norm: one process {_num(n.reference, 4)}; the reduced gradients {reduced}"]
    if result.wrap == "fsdp":
        shards = ", ".join(f"rank {r}: {_num(v, 4)}" for r, v in enumerate(n.per_shard))
        lines.append(f"  a norm of each rank's own shard (p.grad.to_local()) logs {shards}: each sees 1/{result.world} of "
                     f"every gradient; the model's norm is √(Σ shard²) = {_num(sum(v * v for v in n.per_shard) ** 0.5, 4)} "
                     "(clip_grad_norm_ on the DTensor gradients computes it so; clipping with a shard's own norm scales "
                     "each shard differently)")
    return lines


def cause_lines(cause: Cause, result: DistributedResult) -> list[str]:
    from ...distributed.result import CauseKind

    e, world = cause.evidence, result.world
    if cause.kind is CauseKind.BATCHNORM:
        micro = result.batch // world // result.accumulate
        what = (f"BatchNorm statistics per rank ({', '.join(cause.subjects)}): each rank normalises its "
                f"{micro} samples{' of each micro-step' if result.accumulate > 1 else ''} with their own mean and variance, "
                f"one process with all {result.batch}'s")
        fix = "with whole-batch statistics (nn.SyncBatchNorm; on CPU gradcli's all-reduced equivalent, as SyncBatchNorm is GPU-only)"
    elif cause.kind is CauseKind.SUM_LOSS:
        ratios = list(e["ratios"].values())
        what = (f"the loss is reduced with sum: every gradient is the reference times {min(ratios):.6f}..{max(ratios):.6f} "
                f"= 1/{world} (DDP and FSDP average the ranks' gradients, so a sum over each rank's shard is divided by {world})")
        fix = f"with the loss multiplied by {world} (or reduced with mean)"
    elif cause.kind is CauseKind.UNUSED:
        names = ", ".join(cause.subjects)
        where = "; ".join(f"rank {r}: {', '.join(v)}" for r, v in e["no_grad_by_rank"].items())
        what = f"parameters unused in forward get no gradient ({where})"
        if e.get("would_hang"):
            what += (". They are used on some ranks and not on others: DDP without find_unused_parameters would wait "
                     "forever in the all-reduce of their bucket (not run)")
        elif e.get("ddp_error"):
            what += (f". DDP never reduces the bucket holding {names}: the other parameters in it keep each rank's own "
                     f"gradient (unsynchronised: {', '.join(e['unsynchronised']) or 'none'}), and the next forward raises "
                     f"\"{e['ddp_error'].split('.')[0]}\"")
        what += (". find_unused_parameters=True walks the autograd graph after every forward and marks them ready "
                 "(a zero contribution on the ranks that did not use them), at the cost of that walk each step; "
                 "or leave them out of the model")
        fix = "with DDP(find_unused_parameters=True)"
    elif cause.kind is CauseKind.INITIAL_WEIGHTS:
        what = (f"the initial weights differ between ranks (fingerprints {', '.join(e['fingerprints'])}): DDP broadcasts "
                "rank 0's at construction, FSDP2's fully_shard does not, so each rank keeps its shard of its own initialisation")
        fix = "with rank 0's weights broadcast before wrapping (or the same seed on every rank)"
    elif cause.kind is CauseKind.ACCUMULATION:
        ratios = list(e["ratios"].values())
        k = e["steps"]
        what = (f"gradient accumulation is off by the step count: every gradient is the reference times "
                f"{min(ratios):.6f}..{max(ratios):.6f} = {k}: the {k} micro-steps' losses are each a mean over their "
                f"micro-batch, and their gradients add up in .grad (no_sync only defers the reduction), so the "
                f"optimizer gets {k}x the whole batch's mean gradient")
        fix = (f"with each micro-step's loss divided by {k} (loss / accumulation_steps before backward; here "
               "--loss \"... / accumulate\", which is the micro-step count on the ranks and 1 on the one process)")
    else:
        factors = ", ".join(f"rank {r}: {_num(f, 4)}" for r, f in enumerate(e["factors"]))
        shards = ", ".join(f"rank {r}: {_num(n, 4)}" for r, n in enumerate(e["shard_norms"]))
        what = (f"norm clipping on shards: the step {result.step} scaled each rank's own elements by its own factor "
                f"({factors}; one process: {_num(e['reference_factor'], 4)}), each taking its shard's norm ({shards}) to "
                f"the maximum {_num(e['max_norm'], 4)}; the whole gradient's norm is {_num(e['whole_norm'], 4)}. Under "
                "FSDP2 every rank holds 1/N of each gradient: a norm of p.grad.to_local() sees only that share")
        fix = (f"with torch.nn.utils.clip_grad_norm_(model.parameters(), {_num(e['max_norm'], 4)}) on the DTensor gradients "
               "(it reduces the norm over every rank)")
    if cause.proven is None:
        proof = "not rerun"
    elif cause.proven:
        proof = f"proven: rerun {fix}, every gradient agrees (max rel err {_num(cause.after.get('max_rel_err'))})"
        if cause.after.get("together_with"):
            proof += f", together with {', '.join(cause.after['together_with'])}"
    else:
        left = cause.after.get("differing") or cause.after.get("unsynchronised") or []
        proof = f"not proven: rerun {fix}, {len(left)} parameter(s) still differ ({', '.join(left[:6])})"
        if cause.kind is CauseKind.UNUSED and e.get("would_hang") and not cause.after.get("skipped"):
            proof += (": DDP now runs without hanging, but the ranks computed different functions (a branch taken on "
                      "some ranks only), which one process on the whole batch does not")
        if cause.kind is CauseKind.BATCHNORM and result.accumulate > 1:
            proof += (f": with --accumulate {result.accumulate} each micro-step normalises {result.batch // result.accumulate} "
                      "samples even across ranks, so no setup gives BatchNorm the whole batch's statistics; "
                      "--accumulate 1 shows the ranks' own part")
    return [f"  - {what}.", f"    {proof}"]


def distributed_text(result: DistributedResult) -> str:
    run = result.first
    lines = heading(result) + [""]
    if run.skipped:
        lines.append("The wrapped run was not started: it would hang (see the causes).")
    else:
        lines += table(run)
        lines += [""] + norm_lines(result)
    lines.append(f"messages: {run.bytes_reduced:,} bytes of gradients reduced per rank per step "
                 f"(parameters: {result.model_bytes:,} bytes)")
    if result.causes:
        lines += ["", "Causes:"]
        for cause in result.causes:
            lines += cause_lines(cause, result)
    lines += [f"note: {n}" for n in result.notes]
    lines += ["", verdict(result)]
    return "\n".join(lines) + "\n"


def verdict(result: DistributedResult) -> str:
    if result.ok:
        return f"OK: every parameter's reduced gradient agrees with one process on all {result.world} ranks"
    kinds: dict[str, list[str]] = {}
    for p in result.problems:
        kinds.setdefault(p.kind, []).append(p.subject)
    words = {"rank-gradient-differs": "differ from one process", "unsynchronised": "differ between ranks (not synchronised)",
             "ddp-error": "DDP raised on the next iteration", "would-hang": "DDP would hang"}
    parts = []
    for kind, subjects in kinds.items():
        named = [s for s in subjects if s]
        parts.append(f"{len(named)} parameter(s) {words[kind]}" if named else words[kind])
    return "PROBLEM: " + "; ".join(parts)


def grads_rank_lines(result: Any) -> list[str]:
    """What `grads --ddp N` adds below grads' table: the ranks' agreement, in words."""
    run = result.run
    lines = ["", f"The numbers above are the gradients DDP reduced (rank 0 of {result.world}, {result.backend})."]
    if run.skipped:
        lines.append("DDP was not run: parameters unused on some ranks and not others would make it hang "
                     f"({'; '.join(f'rank {r}: ' + ', '.join(n) for r, n in enumerate(run.no_grad) if n)}).")
    for row in run.unsynced:
        lines.append(f"{row.name}: RANKS DIFFER: its reduced gradient differs between ranks by {_num(row.spread)} "
                     "(relative): it was not synchronised")
    if run.ddp_error:
        lines.append(f"DDP raised on the next iteration: {run.ddp_error.split('.')[0]}")
    if result.differing:
        lines.append(f"warning: {len(result.differing)} parameter(s) differ from one process on the whole batch "
                     f"({', '.join(result.differing[:6])}): gradcli compare TARGET ... --ddp {result.world} finds the cause")
    elif not run.unsynced and not run.skipped:
        lines.append("Every rank holds the same gradients, equal to one process's on the whole batch.")
    return lines
