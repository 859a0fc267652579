"""The outcome of `memory`: what backward keeps alive, by node, module and line, the measured
peak, and the checkpoints that were tried.

    result = gradcli.memory(model, x, loss=lambda out: out.pow(2).mean())
    print(result.saved_bytes, result.peak_bytes)

Plain data following gradcli/outcome.py: `problems` are records, `ok` is `not problems`, and
`as_dict()` is the `--json` document (docs/json.md). A memory report is an inspection, so
it is not ok only when something is wrong: backward raised, or a checkpoint proved to change
the gradients. The words live in render/training/memory.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..outcome import Problem, Reported, sentence
from ..words import problem_sentences

#: What a saved storage is: the model's own parameter (or buffer), a forward input, a tensor
#: forward computed (what backward alone keeps alive), or a dtype copy of a parameter that
#: autocast made (the bfloat16 weight under --amp).
Kind = Literal["parameter", "buffer", "input", "activation", "cast"]
#: The kinds that cost memory only because backward will need them.
KEPT_FOR_BACKWARD: tuple[Kind, ...] = ("activation", "cast")


@dataclass
class SavedTensor:
    """One tensor one node saved."""

    shape: tuple[int, ...]
    dtype: str
    bytes: int  # the bytes of its storage (a saved view keeps all of it alive)
    kind: Kind
    storage: int  # storages are numbered 0, 1, ... in the order they were first saved
    first: bool  # this node saved the storage first: totals count it here
    name: str | None = None  # the parameter's or input's name, for those kinds


@dataclass
class NodeSaved:
    """One autograd node that saved tensors, with where the user's code made it."""

    node: str  # AddmmBackward0
    order: int  # forward order among the nodes that saved something
    module: str | None  # the innermost module running ("" the model itself, None: the loss)
    module_class: str | None
    file: str | None
    line: int | None
    code: str | None
    tensors: list[SavedTensor]

    @property
    def bytes(self) -> int:
        """The bytes of the distinct storages this node saved."""
        return sum({t.storage: t.bytes for t in self.tensors}.values())


@dataclass
class Total:
    """Saved bytes grouped under one module (folded at a depth) or one line of code; each
    storage counts once, where it was first saved."""

    key: str  # the module's path, or file:line
    label: str  # the module's class, or the line's code
    bytes: int  # every storage first saved here
    kept: int  # of which activations and autocast copies: what backward alone keeps alive
    tensors: int
    order: int  # forward order of the first save


@dataclass
class CheckpointTrial:
    """One module rerun under torch.utils.checkpoint (use_reentrant=False), measured."""

    module: str
    module_class: str
    forward_seconds: float  # the module's own forward time in the plain run (the extra work)
    predicted_freed: int  # bytes the plain run's saves say checkpointing it frees
    saved_bytes_before: int  # measured, plain run: saved activations and casts (kept_bytes)
    saved_bytes_after: int  # measured, with the checkpoint
    seconds_before: float  # forward + backward, plain (best of the repeats)
    seconds_after: float
    gradients_equal: bool  # every parameter's gradient bit for bit the plain run's
    max_abs_diff: float  # the largest gradient difference (0.0 when equal)
    agrees: bool = True  # within gradcli compare's rounding tolerance when not equal
    peak_before: int | None = None  # measured peak above the start, plain run
    peak_after: int | None = None  # ... with the checkpoint (recomputation happens in backward)
    segments: int | None = None  # a stack checkpointed in this many segments (segments.py); None: the module alone

    @property
    def time_ratio(self) -> float:
        return self.seconds_after / self.seconds_before if self.seconds_before > 0 else float("inf")

    @property
    def predicted_after(self) -> int:
        return self.saved_bytes_before - self.predicted_freed


@dataclass
class MemoryResult(Reported):
    """Everything one `memory` run measured."""

    model: str
    device: str
    dtype: str  # the parameters' dtype
    amp: str | None  # the autocast dtype, or None
    nodes: list[NodeSaved]  # in forward order
    by_kind: dict[str, int]  # saved bytes of each kind (each storage once)
    baseline_bytes: int  # parameters, buffers and inputs: live before forward began
    peak_bytes: int | None  # baseline + the measured peak above it during forward + backward
    peak_how: str  # "cpu" (torch's CPU allocator events), "cuda" (its caching allocator), "none"
    end_bytes: int | None  # tensor bytes forward + backward left allocated (the gradients, ...)
    freed_by_backward: int  # saved bytes a plain backward freed: what retain_graph=True keeps
    create_graph_bytes: int | None  # what backward with create_graph=True saved on top
    unreached_bytes: int = 0  # saved by graph parts the loss does not reach, still alive
    checkpoint: list[CheckpointTrial] = field(default_factory=list)
    module_types: dict[str, str] = field(default_factory=dict)  # path -> class, every module
    module_order: list[str] = field(default_factory=list)  # modules in the order forward ran them
    depth: int | None = None  # modules deeper than this are folded into their ancestor
    loss: float | None = None
    error: str | None = None  # backward raised: torch's message
    notes: list[str] = field(default_factory=list)
    target: str | None = None  # `model.py:Net` when run from the command line
    found: str | None = None
    seed: int | None = None

    # -- totals ------------------------------------------------------------------------------
    @property
    def saved_bytes(self) -> int:
        """Every distinct storage autograd saved for backward, whatever its kind."""
        return sum(self.by_kind.values())

    @property
    def kept_bytes(self) -> int:
        """Saved activations and autocast copies: memory only backward keeps alive."""
        return sum(self.by_kind.get(kind, 0) for kind in KEPT_FOR_BACKWARD)

    def saved(self) -> list[tuple[NodeSaved, SavedTensor]]:
        """Every saved tensor with its node, in forward order."""
        return [(node, t) for node in self.nodes for t in node.tensors]

    def by_module(self, depth: int | None = None) -> list[Total]:
        """Saved bytes per module, folded at `depth` (default: the result's), largest first."""
        depth = self.depth if depth is None else depth
        return _largest_first(self._totals(lambda node: (_folded(node.module, depth), self._module_label(node, depth))))

    def by_line(self) -> list[Total]:
        """Saved bytes per line of the user's code, largest first."""
        return _largest_first(self._totals(lambda node: (
            f"{node.file}:{node.line}" if node.file else "(no line of yours)", node.code or "",
        )))

    def by_dtype(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for _, t in self.saved():
            if t.first:
                found[t.dtype] = found.get(t.dtype, 0) + t.bytes
        return found

    def _totals(self, key_of: Any) -> list[Total]:
        groups: dict[str, Total] = {}
        for order, (node, t) in enumerate(self.saved()):
            if not t.first:
                continue
            key, label = key_of(node)
            total = groups.get(key)
            if total is None:
                total = groups[key] = Total(key, label, 0, 0, 0, order)
            total.bytes += t.bytes
            total.kept += t.bytes if t.kind in KEPT_FOR_BACKWARD else 0
            total.tensors += 1
        return list(groups.values())

    def _module_label(self, node: NodeSaved, depth: int | None) -> str:
        if node.module is None:
            return ""
        key = _folded(node.module, depth)
        return self.module_types.get(key, node.module_class or "")

    def modules_in_forward_order(self, depth: int | None = None) -> list[Total]:
        """by_module in the order forward first ran each (the plot's order)."""
        depth = self.depth if depth is None else depth
        totals = {t.key: t for t in self.by_module(depth)}
        order = []
        for path in self.module_order:
            key = _folded(path, depth)
            if key in totals and key not in order:
                order.append(key)
        order += [key for key in sorted(totals, key=lambda k: totals[k].order) if key not in order]
        return [totals[key] for key in order]

    # -- the protocol ------------------------------------------------------------------------
    @property
    def problems(self) -> list[Problem]:
        found = [Problem("backward-raised", "", {"message": self.error})] if self.error else []
        for trial in self.checkpoint:
            if not trial.agrees:
                found.append(Problem("checkpoint-changes-gradients", trial.module, {"max_abs_diff": trial.max_abs_diff}))
        return found

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "found": self.found, "seed": self.seed, "model": self.model,
            "device": self.device, "dtype": self.dtype, "amp": self.amp, "ok": self.ok, "loss": self.loss,
            "saved_bytes": self.saved_bytes, "kept_bytes": self.kept_bytes, "by_kind": self.by_kind,
            "by_dtype": self.by_dtype(), "peak_bytes": self.peak_bytes, "baseline_bytes": self.baseline_bytes,
            "peak_measured_by": self.peak_how, "end_bytes": self.end_bytes,
            "retain_graph_keeps": self.freed_by_backward, "create_graph_adds": self.create_graph_bytes,
            "unreached_bytes": self.unreached_bytes, "depth": self.depth,
            "nodes": [
                {
                    "node": n.node, "order": n.order, "module": n.module, "module_class": n.module_class,
                    "file": n.file, "line": n.line, "code": n.code, "bytes": n.bytes,
                    "tensors": [
                        {"shape": list(t.shape), "dtype": t.dtype, "bytes": t.bytes, "kind": t.kind,
                         "storage": t.storage, "first": t.first, "name": t.name}
                        for t in n.tensors
                    ],
                }
                for n in self.nodes
            ],
            "modules": [_total_dict(t, "module", "class") for t in self.by_module()],
            "lines": [_total_dict(t, "line", "code") for t in self.by_line()],
            "checkpoint": [
                {
                    "module": c.module, "module_class": c.module_class, "forward_seconds": c.forward_seconds,
                    "predicted_freed": c.predicted_freed, "saved_bytes_before": c.saved_bytes_before,
                    "saved_bytes_after": c.saved_bytes_after, "predicted_after": c.predicted_after,
                    "seconds_before": c.seconds_before, "seconds_after": c.seconds_after,
                    "time_ratio": c.time_ratio, "gradients_equal": c.gradients_equal,
                    "max_abs_diff": c.max_abs_diff, "agrees": c.agrees,
                    "peak_above_start_before": c.peak_before, "peak_above_start_after": c.peak_after,
                    "segments": c.segments,
                }
                for c in self.checkpoint
            ],
            "error": self.error,
            "problems": problem_sentences(self.problems),
            "notes": self.notes,
        }


def _total_dict(total: Total, key: str, label: str) -> dict[str, Any]:
    return {key: total.key, label: total.label, "bytes": total.bytes, "kept_bytes": total.kept, "tensors": total.tensors}


def _folded(module: str | None, depth: int | None) -> str:
    """The module a node's saves are summed under at `depth`; "(loss)" outside the model."""
    if module is None:
        return "(loss)"
    if depth is None or not module:
        return module
    return ".".join(module.split(".")[:depth])


def _largest_first(totals: list[Total]) -> list[Total]:
    return sorted(totals, key=lambda t: (-t.kept, -t.bytes, t.order))


@sentence("checkpoint-changes-gradients")
def _checkpoint_changes_gradients(p: Problem) -> str:
    return f"checkpointing {p.subject} changes the gradients (max |difference| {p.detail['max_abs_diff']:.3g})"
