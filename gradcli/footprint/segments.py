"""Checkpoint advice for a stack of layers, in segments: proven by rerunning, as checkpoint.py's.

A flat `nn.Sequential` (Linear, GELU, ...) gives no module worth checkpointing alone: a leaf's
checkpoint keeps its input, which is what it saved. Checkpointing runs of consecutive layers
frees everything inside each run but its input: torch's own
`torch.utils.checkpoint.checkpoint_sequential(model, segments, x)` for a Sequential, and the
same for the blocks of a `ModuleList` that forward calls one after another (each block's one
input the previous block's output: checked in a plain run, so that running a segment's blocks
from its first block is the same computation). As in checkpoint_sequential, the last segment
is not checkpointed.

Saved bytes fall with every segment added (only the segments' inputs stay), while backward
recomputes one segment at a time on top of them: the peak is smallest near √n segments, the
classic answer. The candidates around √n are each run and measured, and the one with the
smallest measured peak (saved bytes where no peak is measured) is advised, with its saved
bytes, peak, time and every gradient compared with the plain run's.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from ..targets.modules import ModuleHooks

if TYPE_CHECKING:
    from .replay import Run
    from .result import MemoryResult

#: A stack needs this many layers for segments to pay (√4 = 2 segments of 2).
MIN_LAYERS = 4


@dataclass
class Stack:
    """Layers run one after another: an nn.Sequential's children, or a ModuleList's blocks."""

    path: str
    module: Any
    layers: list[Any]

    @property
    def sequential(self) -> bool:
        return isinstance(self.module, torch.nn.Sequential)


def find_stack(result: MemoryResult, run: Run) -> Stack | None:
    """The stack whose layers saved the most bytes, or None: a plain nn.Sequential (its own
    forward) of MIN_LAYERS children or more, or a ModuleList whose blocks forward chains."""
    candidates = []
    for path, module in run.model.named_modules():
        if not isinstance(module, (torch.nn.Sequential, torch.nn.ModuleList)) or len(module) < MIN_LAYERS:
            continue
        if isinstance(module, torch.nn.Sequential) and type(module).forward is not torch.nn.Sequential.forward:
            continue  # a subclass with its own forward: not a chain of its children
        candidates.append(Stack(path, module, list(module)))
    if not candidates:
        return None
    chained = _chained(run, [s for s in candidates if not s.sequential])
    stacks = [s for s in candidates if s.sequential or s.path in chained]
    if not stacks:
        return None
    return max(stacks, key=lambda s: (_saved_inside(result, s.path), -len(s.path)))


def _saved_inside(result: MemoryResult, path: str) -> int:
    prefix = path + "." if path else ""
    return sum(t.bytes for n in result.nodes if n.module is not None and (n.module.startswith(prefix) or n.module == path)
               for t in n.tensors if t.first)


def _chained(run: Run, lists: list[Stack]) -> set[str]:
    """The ModuleLists whose blocks ran each once, in order, each on the previous one's output
    (one positional tensor): a segment may then run from its first block.

    XXX: module hooks see positional arguments only: a block also given keywords
    (`block(x, mask=m)`) looks chained, and its segmented run differs (the gradients then say so)."""
    if not lists:
        return set()
    calls: dict[str, list[list[Any]]] = {s.path: [] for s in lists}  # [index, input, output]
    where = {f"{s.path}.{i}": (s.path, i) for s in lists for i in range(len(s.layers))}

    def enter(path: str, module: Any, args: Any) -> None:
        stack, index = where[path]
        plain = isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], torch.Tensor)
        calls[stack].append([index, args[0] if plain else None, None])

    def leave(path: str, module: Any, args: Any, output: Any) -> None:
        stack, index = where[path]
        if calls[stack] and calls[stack][-1][0] == index:
            calls[stack][-1][2] = output

    blocks = [(f"{s.path}.{i}", layer) for s in lists for i, layer in enumerate(s.layers)]
    try:
        with ModuleHooks(modules=blocks, enter=enter, leave=leave), torch.no_grad(), run.forward_context():
            run.forward()
    finally:
        run.forget()
    chained = set()
    for s in lists:
        seen = calls[s.path]
        if [index for index, _, _ in seen] != list(range(len(s.layers))):
            continue
        if all(x is not None for _, x, _ in seen) and all(
            isinstance(out, torch.Tensor) and seen[k + 1][1] is out for k, (_, _, out) in enumerate(seen[:-1])
        ):
            chained.add(s.path)
    return chained


def candidates(layers: int) -> list[int]:
    """Segment counts to measure: √n and its neighbours, at least 2 and at most n."""
    root = math.sqrt(layers)
    counts = {math.floor(root), math.ceil(root), math.ceil(root) + 1, max(2, math.floor(root) - 1), 2 * math.ceil(root)}
    return sorted(c for c in counts if 2 <= c <= layers)


def bounds(layers: int, segments: int) -> list[tuple[int, int]]:
    """checkpoint_sequential's split: `segments` runs of layers // segments, the last one longer."""
    size = layers // segments
    starts = list(range(0, size * (segments - 1), size))
    return [(start, start + size - 1) for start in starts] + [(size * (segments - 1), layers - 1)]


@contextlib.contextmanager
def segmented(stack: Stack, segments: int) -> Iterator[None]:
    """The stack run in `segments` checkpointed segments meanwhile (the last one plain)."""
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential

    if stack.sequential:
        module = stack.module

        def forward(input: Any) -> Any:
            return checkpoint_sequential(module, segments, input, use_reentrant=False)

        with patched_forward(module, forward):
            yield
        return
    with contextlib.ExitStack() as patches:
        for start, end in bounds(len(stack.layers), segments)[:-1]:
            run_segment = _segment(stack.layers[start:end + 1])

            def first(x: Any, run_segment: Callable[[Any], Any] = run_segment) -> Any:
                return checkpoint(run_segment, x, use_reentrant=False)

            patches.enter_context(patched_forward(stack.layers[start], first))
            for layer in stack.layers[start + 1:end + 1]:
                patches.enter_context(patched_forward(layer, _passed))
        yield


def _segment(layers: list[Any]) -> Callable[[Any], Any]:
    # XXX: the blocks' own forwards are called, not the modules: hooks registered on a block
    # inside a segment do not fire in this run (the gradients are compared all the same).
    originals = [layer.forward for layer in layers]  # the bound forwards, before any patch

    def run_segment(x: Any) -> Any:
        for forward in originals:
            x = forward(x)
        return x

    return run_segment


def _passed(x: Any) -> Any:
    """A block inside a segment: its segment's first block ran it already."""
    return x


@contextlib.contextmanager
def patched_forward(module: Any, forward: Callable[..., Any]) -> Iterator[None]:
    """`module.forward` is `forward` meanwhile; its own (an instance attribute or the class's) after."""
    own = module.__dict__.get("forward")
    module.forward = forward
    try:
        yield
    finally:
        if own is None:
            del module.forward
        else:
            module.forward = own


