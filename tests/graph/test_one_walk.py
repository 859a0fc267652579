"""graph/nodes.py is the one walk of grad_fn and targets/flatten.py the one flattener of a
model's output: what they yield, against torch's own graph and torch's own pytree, and a scan
of the package that fails on a new hand-written walk of `next_functions` anywhere else."""

from __future__ import annotations

import ast
import collections
import dataclasses
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree

from gradcli.graph.nodes import ACCUMULATE_GRAD, edges, inputs_of, reachable, saved_names, visits, walk
from gradcli.targets.flatten import leaves, tensors_in
from paths import ROOT

PACKAGE = ROOT / "gradcli"
#: Where `next_functions` may be read: the walk itself, and the demos, which show it to the reader.
ALLOWED = ("graph/nodes.py", "demos/")


def readers_of_next_functions(root: Path = PACKAGE) -> list[str]:
    """`file:line` of every `.next_functions` read (or getattr of it) outside ALLOWED."""
    found = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where.startswith(ALLOWED):
            continue
        lines = sorted(node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                       if (isinstance(node, ast.Attribute) and node.attr == "next_functions")
                       or (isinstance(node, ast.Constant) and node.value == "next_functions"))
        found += [f"{where}:{line}" for line in lines]
    return found


def test_no_walk_of_grad_fn_outside_graph_nodes():
    assert readers_of_next_functions() == []


def test_the_scan_finds_a_hand_written_walk(tmp_path):
    (tmp_path / "graph").mkdir()
    (tmp_path / "health").mkdir()
    (tmp_path / "graph" / "nodes.py").write_text("def edges(node):\n    return node.next_functions\n")
    (tmp_path / "health" / "mine.py").write_text(
        "def nodes(root):\n    stack = [root]\n    while stack:\n        node = stack.pop()\n"
        "        stack.extend(fn for fn, _ in node.next_functions if fn is not None)\n"
        "        yield getattr(node, 'next_functions')\n")
    assert readers_of_next_functions(tmp_path) == ["health/mine.py:5", "health/mine.py:6"]


def _diamonds(n=40):
    """`h = h*h + h` n times: 2n+1 nodes (a mul and an add per step, x's AccumulateGrad), 2^n paths."""
    x = torch.tensor(0.5, requires_grad=True)
    h = x
    for _ in range(n):
        h = h * h + h
    return x, h


def test_each_node_once_before_its_inputs_and_after_them_in_post_order():
    x, h = _diamonds()
    pre, post = list(walk(h.grad_fn)), list(walk(h.grad_fn, order="post"))
    assert len(pre) == len({id(n) for n in pre}) == 2 * 40 + 1
    assert {id(n) for n in post} == {id(n) for n in pre} and len(post) == len(pre)
    assert pre[0] is h.grad_fn and post[-1] is h.grad_fn and post[0].name() == ACCUMULATE_GRAD
    assert post[0].variable is x
    for order, before in ((pre, lambda a, b: a < b), (post, lambda a, b: a > b)):
        place = {id(n): i for i, n in enumerate(order)}
        for node in order:
            for child in inputs_of(node):
                assert child is None or before(place[id(node)], place[id(child)])
    # torch numbers nodes as it makes them: a post-order is forward's order along every edge
    assert all(a._sequence_nr() < b._sequence_nr() for a, b in zip(post[1:], post[2:]) if inputs_of(b)[0] is a)


def test_pre_order_is_a_tree_drawings_inputs_in_next_functions_order():
    a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    out = (a.exp() * b.sin()).sum()
    names = [n.name() for n in walk(out.grad_fn)]
    assert names == ["SumBackward0", "MulBackward0", "ExpBackward0", ACCUMULATE_GRAD, "SinBackward0", ACCUMULATE_GRAD]
    seen = list(visits(out.grad_fn))
    assert all(found == node.next_functions for node, found in seen)
    assert edges(out.grad_fn) == out.grad_fn.next_functions


def test_a_boundary_is_neither_yielded_nor_walked_past():
    a = torch.ones(2, requires_grad=True)
    inner = a.exp()
    out = (inner.sin() + 1).sum()
    stop = inner.grad_fn
    assert [n.name() for n in walk(out.grad_fn, enter=lambda n: n is not stop)] == ["SumBackward0", "AddBackward0", "SinBackward0"]
    assert reachable(None) == set() and len(reachable([out.grad_fn, inner.grad_fn])) == 5


def test_a_20000_deep_chain_is_walked_without_recursion():
    x = torch.ones(1, requires_grad=True)
    h = x
    for _ in range(20_000):
        h = h + 1
    assert len(list(walk(h.grad_fn, order="post"))) == len(list(walk(h.grad_fn))) == 20_001


def test_saved_names_are_torchs_saved_attributes_and_a_functions_saved_tensors():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = torch.ones(2, requires_grad=True)
    mul = (x * x).grad_fn
    assert saved_names(type(mul)) == tuple(sorted(a for a in dir(mul) if a.startswith("_saved_")))
    node = Square.apply(x).grad_fn
    assert "saved_tensors" in saved_names(type(node), functions=True) and "saved_tensors" not in saved_names(type(node))


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    extra: tuple


Pair = collections.namedtuple("Pair", "first second")


def test_leaves_are_pytrees_for_the_containers_torch_knows():
    t = [torch.full((1,), float(i)) for i in range(6)]
    for value in (t[0], (t[0], 2, {"k": t[1], "j": [t[2], None]}), Pair(t[0], (t[1], "s")),
                  collections.OrderedDict(a=t[3], b=(t[4], t[5])), torch.max(torch.randn(3, 2), 0), [], ()):
        assert [id(x) for x in leaves(value)] == [id(x) for x in pytree.tree_leaves(value)]
        assert [id(x) for x in tensors_in(value)] == [id(x) for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]


def test_a_dataclass_a_model_output_and_a_registered_container_are_opened():
    transformers = pytest.importorskip("transformers")
    t = [torch.full((1,), float(i)) for i in range(6)]
    output = transformers.modeling_outputs.BaseModelOutput(last_hidden_state=t[1], hidden_states=(t[2], t[3]))
    found = tensors_in([Out(t[0], (output, Pair(t[4], {"z": t[5]})))])
    assert [float(x) for x in found] == [0, 1, 2, 3, 4, 5]

    class Box:
        def __init__(self, *items):
            self.items = items

    pytree.register_pytree_node(Box, lambda b: (list(b.items), None), lambda items, _: Box(*items))
    try:
        assert [float(x) for x in tensors_in(Box(t[0], [t[1]]))] == [0, 1] == [float(x) for x in pytree.tree_leaves(Box(t[0], [t[1]]))]
    finally:
        pytree._deregister_pytree_node(Box)


def test_a_container_that_holds_itself_is_opened_once():
    t = torch.ones(1)
    loop = [t]
    loop.append(loop)
    assert tensors_in(loop) == [t]
