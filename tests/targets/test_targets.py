"""The Target abstraction: trace reads a Computation, whatever built it."""

from __future__ import annotations

import torch

from gradcli.errors import Span
from gradcli.tracing.trace import trace
from gradcli.render.trace_json import trace_document
from gradcli.targets.base import BuildSettings, Computation, LeafSource, Origin
from gradcli.targets.expression import ExpressionTarget


class HandBuilt:
    """A Target written by hand: y = (w * x).sum(), w a named leaf, x data."""

    def build(self, settings: BuildSettings) -> Computation:
        w = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
        x = torch.tensor([3.0, 4.0], dtype=torch.float64)
        product = w * x
        product.grad_fn.metadata["where"] = Origin(module="scale", module_class="Scale", file="m.py", line=7, code="w * x")
        total = product.sum()
        return Computation(
            kind="function", description="hand-built", leaves={"w": w, "x": x},
            sources={"w": LeafSource("parameter"), "x": LeafSource("[3.0, 4.0]")},
            output=total, bindings=[("product", product)],
            origin_of=lambda fn: fn.metadata.get("where"),
        )


def test_a_target_other_than_an_expression_is_traced_the_same_way():
    result = trace(HandBuilt())
    leaves = {leaf.name: leaf for leaf in result.leaves}
    assert leaves["w"].grad == [3.0, 4.0]  # d/dw sum(w*x) = x
    assert leaves["x"].requires_grad is False and leaves["x"].grad is None
    assert result.options["wrt"] == ["w"]  # only what requires grad is differentiated
    mul = next(node for node in result.graph.nodes if node.name == "MulBackward0")
    assert mul.origin == Origin(module="scale", module_class="Scale", file="m.py", line=7, code="w * x")
    assert mul.label == "product" and mul.span is None
    assert result.expression == "hand-built"


def test_the_expression_target_and_the_text_give_the_same_document():
    from_text = trace_document(trace("h = x*x; h.sum()", ["x=[1.0, 2.0]"], seed=0))
    from_target = trace_document(trace(ExpressionTarget("h = x*x; h.sum()", ["x=[1.0, 2.0]"]), seed=0))
    assert from_text == from_target
    mul = next(node for node in from_text["nodes"] if node["name"] == "MulBackward0")
    assert mul["span"] == {"line": 1, "col": 4, "end_line": 1, "end_col": 7}


def test_an_expression_node_origin_is_its_span():
    result = trace("x.exp().sum()", ["x=[0.0]"])
    exp = next(node for node in result.graph.nodes if node.name == "ExpBackward0")
    assert exp.origin == Origin(span=Span(1, 0, 1, 7))
