"""The autograd graph that torch built, read into plain data: each node once.

nodes.py's walk visits each node once (the graph is a DAG with far more paths than nodes), so
this costs time linear in nodes+edges. Nodes are listed in its depth-first pre-order from the
output, children in `next_functions` order: the order in which a tree drawing meets them first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..errors import Span
from ..targets.base import Origin, OriginOf
from ..targets.expression import expression_origin
from .nodes import ACCUMULATE_GRAD, saved_names, visits
from .values import plain_scalar, summary
#: In torch's message when a saved tensor was modified in place after it was saved.
_INPLACE = "modified by an inplace operation"


@dataclass
class GraphNode:
    """One autograd node: `name()` exactly, its edges, what it saved for backward."""

    id: str
    name: str
    next: list[str | None]
    saved: dict[str, Any] = field(default_factory=dict)
    variable: str | None = None  # AccumulateGrad: the leaf it writes .grad of
    label: str | None = None  # the assigned name(s) bound to this node's output
    origin: Origin | None = None  # where the operation was written (expression span, or code)
    same_as: str | None = None  # the same torch node in another walked graph (see walk_graph)

    @property
    def span(self) -> Span | None:
        """Where in an expression's text the operation was written."""
        return None if self.origin is None else self.origin.span


@dataclass
class Graph:
    """Every distinct node reachable from a root, and the torch objects behind them."""

    root: str | None
    nodes: list[GraphNode]
    objects: dict[str, Any] = field(default_factory=dict, repr=False)  # id -> grad_fn

    def by_id(self) -> dict[str, GraphNode]:
        return {node.id: node for node in self.nodes}


def walk_graph(
    root: Any,
    *,
    leaf_names: Mapping[int, str] | None = None,
    labels: Mapping[int, str] | None = None,
    prefix: str = "n",
    known: Graph | None = None,
    origin_of: OriginOf = expression_origin,
) -> Graph:
    """Walk from the grad_fn `root` (None gives an empty graph).

    `leaf_names` maps id(leaf tensor) to its variable name, `labels` maps id(grad_fn) to the
    assigned name(s) (see `Labels`), `origin_of` says where a node was created (the
    Computation's). Ids are `prefix` + position in the walk. Nodes that are also in the `known`
    graph (a gradient's graph reaching into the traced one) say which.
    """
    leaf_names = leaf_names or {}
    labels = labels or {}
    if root is None:
        return Graph(None, [])
    # Each node's edges are read from torch once, by the walk, and kept for the reader.
    # `order` keeps every node object alive, which keeps its id() (and torch's object for
    # it) stable while the nodes are read.
    order = list(visits(root))
    ids = {id(fn): f"{prefix}{i}" for i, (fn, _) in enumerate(order)}
    reader = _NodeReader(ids, leaf_names, labels, origin_of=origin_of)
    nodes = [reader.node(fn, edges) for fn, edges in order]
    if known is not None:
        known_ids = {id(obj): node_id for node_id, obj in known.objects.items()}
        for node, (fn, _) in zip(nodes, order):
            node.same_as = known_ids.get(id(fn))
    objects = {node.id: fn for node, (fn, _) in zip(nodes, order)}
    return Graph(ids[id(root)], nodes, objects)


def saved_values(
    grad_fn: Any, leaf_names: Mapping[int, str] | None = None, bound: Mapping[int, str] | None = None
) -> dict[str, Any]:
    """The node's `_saved_*` attributes: tensors as shape+preview, others as their value.

    A saved tensor read after backward freed it (no retain_graph) raises in torch; it is
    reported as `{"freed": "<torch's message>"}` instead.
    """
    return _NodeReader({}, leaf_names or {}, {}, bound=bound or {}).saved(grad_fn)


class _NodeReader:
    """Reads torch's nodes into GraphNodes. One per walk: what every node is looked up in
    (ids, leaf and bound names, labels) is gathered once, and reading a node is only that."""

    def __init__(
        self, ids: Mapping[int, str], leaf_names: Mapping[int, str], labels: Mapping[int, str],
        bound: Mapping[int, str] | None = None, origin_of: OriginOf = expression_origin,
    ) -> None:
        import torch

        self.tensor_type = torch.Tensor
        self.ids = ids
        self.leaf_names = leaf_names
        self.labels = labels
        self.bound = bound if bound is not None else getattr(labels, "tensors", {})
        self.origin_of = origin_of

    def node(self, grad_fn: Any, edges: tuple[tuple[Any, int], ...]) -> GraphNode:
        """`edges` is the node's next_functions, as the walk already read them."""
        name = grad_fn.name()
        ids = self.ids
        node = GraphNode(
            id=ids[id(grad_fn)],
            name=name,
            next=[None if fn is None else ids[id(fn)] for fn, _ in edges],
            saved=self.saved(grad_fn),
            label=self.labels.get(id(grad_fn)),
            origin=self.origin_of(grad_fn),
        )
        if name == ACCUMULATE_GRAD:
            node.variable = self.leaf_names.get(id(grad_fn.variable), "?")
        return node

    def saved(self, grad_fn: Any) -> dict[str, Any]:
        saved: dict[str, Any] = {}
        tensor_type = self.tensor_type
        for name in saved_names(type(grad_fn)):
            try:
                value = getattr(grad_fn, name)
            except RuntimeError as err:
                # Freed by an earlier pass, or changed in place since it was saved (user code).
                message = str(err).split(". ")[0]
                saved[name] = {"modified" if _INPLACE in message else "freed": message}
                continue
            if isinstance(value, tensor_type):
                saved[name] = self._tensor(value)
            elif isinstance(value, (list, tuple)) and any(isinstance(v, tensor_type) for v in value):
                saved[name] = [self._tensor(v) if isinstance(v, tensor_type) else plain_scalar(v) for v in value]
            else:
                saved[name] = plain_scalar(value)
        return saved

    def _tensor(self, value: Any) -> dict[str, Any]:
        data = summary(value)
        # A saved input that is a leaf (or an assigned intermediate) is that very tensor: say
        # which, rather than merge them (torchviz merges a saved leaf into the leaf).
        key = id(value)
        if key in self.leaf_names:
            data["variable"] = self.leaf_names[key]
        elif key in self.bound:
            data["bound"] = self.bound[key]
        return data


_NUMBER = object()  # what a binding without .grad_fn gives Labels


class Labels(dict):
    """id(grad_fn) -> the assigned names bound to its output, in order (`g = h` gives "h, g").

    It holds the grad_fn objects too: torch makes a node's Python object on demand and drops
    it when unused, so an id() is only meaningful while the object is alive. Bindings to
    leaves or to constants have no node of their own and give no label.
    """

    def __init__(self, bindings: Iterable[tuple[str, Any]] = ()) -> None:
        super().__init__()
        alive: list[tuple[Any, Any]] = []
        self._alive = alive
        tensors: dict[int, str] = {}  # id(bound tensor) -> its names, for saved tensors
        self.tensors = tensors
        more: dict[int, list[str]] = {}  # a node's names, where it has more than one
        # Once per assignment (a 20,000-line program's 20,000): each call here counts.
        for name, value in bindings:
            grad_fn = getattr(value, "grad_fn", _NUMBER)  # each read is a call into torch: read it once
            if grad_fn is _NUMBER:  # a plain number
                continue
            alive.append((value, grad_fn))
            key = id(value)
            known = tensors.get(key)
            tensors[key] = name if known is None or known == name else f"{known}, {name}"
            if grad_fn is not None:
                node = id(grad_fn)
                first = self.setdefault(node, name)
                if first != name:
                    bound = more.setdefault(node, [first])
                    if name not in bound:
                        bound.append(name)
        self.update({node: ", ".join(bound) for node, bound in more.items()})


def leaf_ids(leaves: Mapping[str, Any]) -> dict[int, str]:
    """id(leaf tensor) -> its variable name."""
    return {id(tensor): name for name, tensor in leaves.items()}
