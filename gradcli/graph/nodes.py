"""The nodes of a graph torch built, as torch's own objects: each once, parents before children
(depth-first from the roots, `next_functions` in order). walk.py reads them into plain data;
this is for the callers that only need the objects (watch's detectors)."""

from __future__ import annotations

from typing import Any, Iterable, Iterator


def grad_fn_nodes(roots: Iterable[Any]) -> Iterator[Any]:
    """Every node reachable from the `roots` (grad_fn objects; None is skipped), each once,
    iteratively (a 20,000-operation chain is 20,000 deep)."""
    seen: set[int] = set()
    kept: list[Any] = []  # keeps each node alive, so that its id() stays its own during the walk
    stack = [r for r in reversed(list(roots)) if r is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        kept.append(node)
        yield node
        stack.extend(fn for fn, _ in reversed(node.next_functions) if fn is not None and id(fn) not in seen)
