"""The contract of a torch.autograd.Function, audited from one forward and one backward.

gradcheck says whether the numbers are right; it does not say that backward returned a
gradient for an input that needs none, that forward kept a tensor on `ctx` where torch
cannot see it, or that torch will refuse the backward altogether. Those are read here from
the objects themselves: the backward node is the `ctx` (its `saved_tensors`, its attributes,
`needs_input_grad`), and calling the class's `backward` on it directly gives what the user
returned before torch validates it, so a wrong count is named instead of crashing later.

Findings are of three kinds: an `error` torch refuses (the other checks cannot run, exit
1), a `note` (legal but wasteful or leaky), `by design` (a declared limit, not a fault).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import torch

from .diagnose import is_once_differentiable
from .inputs import Inputs

FindingKind = Literal["error", "note", "by design"]
SavedRole = Literal["input", "output", "intermediate"]


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text}


@dataclass(frozen=True)
class SavedTensor:
    """One tensor forward kept for backward: which input or output it is, or neither."""

    role: SavedRole
    name: str  # the input's name, "out" / "out_1" for outputs, "" for an intermediate
    shape: tuple[int, ...]

    def __str__(self) -> str:
        if self.role == "intermediate":
            return f"an intermediate {list(self.shape)}"
        return f"{self.name} ({self.role})"

    def as_dict(self) -> dict[str, Any]:
        return {"role": self.role, "name": self.name or None, "shape": list(self.shape)}


@dataclass
class ContractAudit:
    inputs: int
    gradients: int | None  # how many backward returned; None when it was not called
    saved: list[SavedTensor] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    label = ""  # not named in the OK verdict: an audit agrees with nothing

    @property
    def ok(self) -> bool:
        """False when torch refuses the backward (an `error` finding)."""
        return not any(f.kind == "error" for f in self.findings)

    def summary(self) -> str:
        count = ("backward not called" if self.gradients is None
                 else f"backward returns {self.gradients} gradient{'s' if self.gradients != 1 else ''} "
                      f"for {self.inputs} input{'s' if self.inputs != 1 else ''}")
        saved = ", ".join(str(s) for s in self.saved) or "nothing"
        return f"{count}; saved for backward: {saved}"

    def lines(self) -> list[tuple[str, bool]]:
        """(text, is a problem) per line, for both renderers."""
        return [(f"contract: {self.summary()}", False)] + [
            (f"contract {f.kind}: {f.text}", f.kind == "error") for f in self.findings
        ]

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "inputs": self.inputs, "gradients": self.gradients,
                "saved": [s.as_dict() for s in self.saved], "findings": [f.as_dict() for f in self.findings]}


def audit_contract(cls: type, inputs: Inputs, order: int) -> ContractAudit:
    """The audit of `cls` at `inputs` (floating tensors made leaves that require grad)."""
    name = cls.__name__
    audit = ContractAudit(len(inputs.names), None)
    if order == 2 and is_once_differentiable(cls):
        audit.findings.append(Finding("by design", f"{name}.backward is @once_differentiable: not twice "
                                                   "differentiable, by design, so the second-order checks do not run"))
    args, leaves = leaf_arguments(inputs, needing=None)
    outs, node = apply_once(cls, args)
    if node is None:
        return audit
    audit.saved = _classify(_saved_tensors(node), leaves, outs)
    audit.findings += _ctx_attributes(node, leaves, outs)
    returned = _raw_backward(cls, node, outs)
    if returned is None:
        return audit  # backward raised: the checks that follow report it with the user's line
    audit.gradients = len(returned)
    audit.findings += _returned(name, inputs, returned)
    if audit.ok:
        audit.findings += _needs_input_grad(cls, inputs)
    return audit


def leaf_arguments(inputs: Inputs, needing: str | None) -> tuple[list[Any], dict[str, torch.Tensor]]:
    """forward's arguments, with each floating tensor a clone of a fresh leaf (an in-place
    Function, ctx.mark_dirty, may not modify a leaf), by name; all require grad unless
    `needing` is one name, then every other does and it does not."""
    args, received = [], {}
    for n, v in zip(inputs.names, inputs.values):
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            v = v.detach().clone().requires_grad_(n != needing).clone()
            received[n] = v
        args.append(v)
    return args, received


def apply_once(cls: type, args: Sequence[Any]) -> tuple[tuple[Any, ...], Any]:
    """forward's outputs through `apply`, and their backward node (which is the ctx); no
    outputs and None when forward raised or gave no graph."""
    try:
        out = cls.apply(*args)  # type: ignore[attr-defined]
    except (Exception, SystemExit):
        return (), None  # the checks that follow report forward's error with the user's line
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    nodes = [o.grad_fn for o in outs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    return outs, (nodes[0] if nodes else None)


def _saved_tensors(node: Any) -> list[torch.Tensor]:
    try:
        return [t for t in (node.saved_tensors or ()) if isinstance(t, torch.Tensor)]
    except RuntimeError:  # already freed, or saved tensors a hook refused
        return []


def _same(a: torch.Tensor, b: Any) -> bool:
    """The same tensor, or a view of the same memory with the same shape (how a saved input
    or output comes back from ctx.saved_tensors)."""
    return isinstance(b, torch.Tensor) and (a is b or (a.shape == b.shape and a.numel() > 0
                                                     and a.data_ptr() == b.data_ptr()))


def _identify(t: torch.Tensor, leaves: dict[str, torch.Tensor], outs: Sequence[Any]) -> SavedTensor:
    for n, leaf in leaves.items():
        if _same(t, leaf):
            return SavedTensor("input", n, tuple(t.shape))
    for k, o in enumerate(outs):
        if _same(t, o):
            return SavedTensor("output", "out" if k == 0 else f"out_{k}", tuple(t.shape))
    return SavedTensor("intermediate", "", tuple(t.shape))


def _classify(saved: list[torch.Tensor], leaves: dict[str, torch.Tensor], outs: Sequence[Any]) -> list[SavedTensor]:
    return [_identify(t, leaves, outs) for t in saved]


def _ctx_attributes(node: Any, leaves: dict[str, torch.Tensor], outs: Sequence[Any]) -> list[Finding]:
    """`ctx.foo = tensor`: outside save_for_backward torch neither checks the tensor for
    in-place changes nor frees it after backward; an output kept there is a reference cycle
    (output -> grad_fn -> ctx -> output) that only the garbage collector breaks."""
    found = []
    for attr, value in sorted(getattr(node, "__dict__", {}).items()):
        held = [value] if isinstance(value, torch.Tensor) else (
            [v for v in value if isinstance(v, torch.Tensor)] if isinstance(value, (tuple, list)) else [])
        for t in held:
            what = _identify(t, leaves, outs)
            if what.role == "output":
                why = (f"forward's output {what.name}: a reference cycle (output -> grad_fn -> ctx -> output), "
                       "so the graph's memory waits for the garbage collector")
            elif what.role == "input":
                why = f"input {what.name}: an in-place change of it after forward goes unnoticed"
            else:
                why = (f"an intermediate {list(t.shape)}: torch does not check it for in-place changes "
                       "and keeps it alive as long as the graph")
            found.append(Finding("note", f"ctx.{attr} holds a tensor, {why}; "
                                         "pass it to ctx.save_for_backward instead"))
    return found


def _raw_backward(cls: type, node: Any, outs: Sequence[Any]) -> tuple[Any, ...] | None:
    """What the user's backward returns, before torch checks it (the node is the ctx)."""
    grads = [torch.ones_like(o) if isinstance(o, torch.Tensor) and o.is_floating_point() else None for o in outs]
    try:
        with torch.no_grad():
            returned = cls.backward(node, *grads)  # type: ignore[attr-defined]
    except (Exception, SystemExit):
        return None
    return tuple(returned) if isinstance(returned, (tuple, list)) else (returned,)


def _returned(name: str, inputs: Inputs, returned: tuple[Any, ...]) -> list[Finding]:
    """The errors torch raises for backward's return value, in words: one gradient per
    input of forward (extra trailing Nones allowed), None for non-tensors, and each
    gradient of a shape torch can reduce to its input's."""
    expected = len(inputs.names)
    signature = ", ".join(inputs.names)
    if len(returned) < expected or any(g is not None for g in returned[expected:]):
        return [Finding("error", f"{name}.backward returns {len(returned)} gradient{'s' if len(returned) != 1 else ''} "
                                 f"but forward takes {expected} input{'s' if expected != 1 else ''} ({signature}): "
                                 "return one per input, in order, None for those without a gradient")]
    found = []
    for n, value, g in zip(inputs.names, inputs.values, returned):
        if g is None:
            continue
        if not isinstance(value, torch.Tensor):
            found.append(Finding("error", f"{name}.backward returns a gradient for {n}, which is not a tensor "
                                          f"({type(value).__name__}): torch refuses it; return None for {n}"))
        elif isinstance(g, torch.Tensor) and not _reducible(value.shape, g.shape):
            found.append(Finding("error", f"{name}.backward returns a gradient of shape {list(g.shape)} for {n}, "
                                          f"whose shape is {list(value.shape)}: torch refuses it"))
    return found


def _reducible(shape: torch.Size, grad: torch.Size) -> bool:
    """torch accepts a gradient of the input's shape, or one the input broadcasts to (it sums)."""
    if shape == grad:
        return True
    try:
        return torch.broadcast_shapes(shape, grad) == grad
    except RuntimeError:
        return False


def _needs_input_grad(cls: type, inputs: Inputs) -> list[Finding]:
    """With one floating input not requiring grad, does backward still compute its gradient?
    torch throws it away: wasted work (`if ctx.needs_input_grad[i]:` avoids it)."""
    floating = [n for n, v in zip(inputs.names, inputs.values)
                if isinstance(v, torch.Tensor) and v.is_floating_point()]
    if len(floating) < 2:
        return []  # with its only input not requiring grad, forward's output has no backward
    found = []
    for n in floating:
        args, _ = leaf_arguments(inputs, needing=n)
        outs, node = apply_once(cls, args)
        returned = _raw_backward(cls, node, outs) if node is not None else None
        i = inputs.names.index(n)
        if returned is not None and i < len(returned) and returned[i] is not None:
            found.append(Finding("note", f"{cls.__name__}.backward computes a gradient for {n} although "
                                         f"ctx.needs_input_grad[{i}] is False (torch discards it): "
                                         f"compute it only under `if ctx.needs_input_grad[{i}]:`"))
    return found
