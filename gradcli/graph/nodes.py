"""The one walk of torch's autograd graph: every reader of `next_functions` is here.

The graph behind `output.grad_fn` is a DAG: `h = x; h = h*h + h` repeated 40 times has ~120
nodes but 2^40 paths from the output to `x`. So a walk visits each node once (keyed by the
Python object torch hands back for it: torch returns the same object for a node as long as
one is alive, and the walk keeps every node it met alive until it ends), and it is iterative
(a 20,000-operation chain is 20,000 deep, far past Python's recursion limit).

Callers need three things of a graph, and each is one function here:
- its order: `walk(roots)` yields each node once, depth-first, a node before its inputs and
  its inputs in `next_functions` order (the order a tree drawing meets them); `order="post"`
  yields each node after all of its inputs (the order forward computed them). `enter(node)`
  False makes a node a boundary: neither yielded nor walked past.
- its edges: `edges(node)` (one `(node or None, input_nr)` per input of the operation; None
  for an input that needs no gradient), `inputs_of(node)` the nodes alone, `visits(roots)` each
  node with its edges as the walk read them (read once: each read is a call into torch).
- its saved tensors: `saved_names(type(node))`, the attributes that unpack them.

This module sits below targets/ (its floor in tests/project/test_layers.py): the recorder tags nodes
with it, and it imports nothing of gradcli's. tests/graph/test_one_walk.py fails on a reader of
`next_functions` anywhere else (demos/ excepted: showing it is their point).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Literal

#: What torch calls the node that writes a leaf's .grad.
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
_SAVED_PREFIX = "_saved_"

Edges = tuple[tuple[Any, int], ...]


def edges(node: Any) -> Edges:
    """The node's edges: one `(node or None, input_nr)` per input of its operation."""
    return node.next_functions


def inputs_of(node: Any) -> list[Any]:
    """The nodes behind the node's inputs, one per input (None: it needs no gradient)."""
    return [fn for fn, _ in node.next_functions]


def is_accumulate(node: Any) -> bool:
    """Whether `node` is an AccumulateGrad: it writes a leaf's .grad (`node.variable`)."""
    return hasattr(node, "variable")


def visits(roots: Any | Iterable[Any], *, enter: Callable[[Any], bool] | None = None,
           order: Literal["pre", "post"] = "pre") -> Iterator[tuple[Any, Edges]]:
    """Each node reachable from `roots` (a node, or several; None is skipped) once, with its
    edges, in depth-first pre-order (a node before its inputs) or post-order (after them).
    A node for which `enter` is false is neither yielded nor walked past."""
    roots = [roots] if not isinstance(roots, (list, tuple)) else roots
    seen: dict[int, Any] = {}  # id -> node: kept alive, so that no other node takes its id
    if order == "pre":
        stack = [fn for fn in reversed(roots) if fn is not None]
        while stack:
            node = stack.pop()
            key = id(node)
            if key in seen:
                continue
            seen[key] = node
            if enter is not None and not enter(node):
                continue
            found = node.next_functions
            yield node, found
            for fn, _ in reversed(found):  # a loop, not a generator: a chain's one input costs no call
                if fn is not None and id(fn) not in seen:
                    stack.append(fn)
        return
    # Post-order: a node is pushed again, with its edges, under its inputs; popped the second
    # time, every input is done.
    pending: list[tuple[Any, Edges | None]] = [(fn, None) for fn in reversed(roots) if fn is not None]
    while pending:
        node, found = pending.pop()
        if found is not None:
            yield node, found
            continue
        key = id(node)
        if key in seen:
            continue
        seen[key] = node
        if enter is not None and not enter(node):
            continue
        found = node.next_functions
        pending.append((node, found))
        pending.extend((fn, None) for fn, _ in reversed(found) if fn is not None and id(fn) not in seen)


def walk(roots: Any | Iterable[Any], *, enter: Callable[[Any], bool] | None = None,
         order: Literal["pre", "post"] = "pre") -> Iterator[Any]:
    """Each node reachable from `roots` once (see `visits`)."""
    return (node for node, _ in visits(roots, enter=enter, order=order))


def reachable(roots: Any | Iterable[Any], *, enter: Callable[[Any], bool] | None = None) -> set[int]:
    """The ids of the nodes reachable from `roots` (see `visits`), roots included."""
    return {id(node) for node, _ in visits(roots, enter=enter)}


_SAVED_NAMES: dict[tuple[type, bool], tuple[str, ...]] = {}


def saved_names(kind: type, *, functions: bool = False) -> tuple[str, ...]:
    """A node type's attributes that unpack what it saved for backward (`_saved_self`,
    `_saved_result`, ...); with `functions`, a custom autograd.Function's `saved_tensors`
    too (its node is its ctx)."""
    # dir() is the slowest step of a walk that reads saved values; every node of one class
    # has the same attributes.
    key = (kind, functions)
    if key not in _SAVED_NAMES:
        names = tuple(a for a in dir(kind) if a.startswith(_SAVED_PREFIX))
        if functions and hasattr(kind, "_forward_cls"):
            names += ("saved_tensors",)
        _SAVED_NAMES[key] = names
    return _SAVED_NAMES[key]
