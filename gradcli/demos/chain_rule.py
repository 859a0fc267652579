"""`gradcli demo chain-rule`: backward is the chain rule, one node at a time.

The seed's example: y = x**2, then z = y*y + y. Each backward node multiplies the gradient
arriving at it by its local derivative and sends the product along each input edge; y is
used three times, so three contributions meet there and are summed before y's own node
runs. The demo shows it with torch's hooks, then as formulas (`trace --symbolic`), and
checks the composition against sympy.
"""

from __future__ import annotations

from typing import Any

from .runner import Session

SUMMARY = "y = x**2; z = y*y + y: each node's local derivative, the three paths summed at y, as formulas"


def run(session: Session, **_: Any) -> None:
    session.step("The program, and the gradient torch gives")
    session.say("""z = y*y + y with y = x**2. By hand: dz/dy = 2y + 1, dy/dx = 2x, so
        dz/dx = 2x(2y + 1) = 2·3·(2·9 + 1) = 114 at x = 3.""")
    grad = session.run("""
        import torch

        x = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
        y = x**2
        z = y * y + y
        z.backward()
        x.grad.item()
    """)
    session.verdict(grad == 114.0, "x.grad = 2x(2y + 1) = 114")

    session.step("Node by node: what each backward node sends along its edges")
    session.say("""A hook on a node sees the gradients it sends along each input edge (grad_inputs).
        AddBackward0 (z = u + y) sends its incoming 1 to both inputs; MulBackward0 (u = y*y)
        sends g·y along each of its two edges, both to y; so three contributions reach y.""")
    sent = session.run("""
        x = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
        y = x**2
        z = y * y + y
        seen = {}

        def record(name):
            def hook(grad_inputs, grad_outputs):  # returns None: a value would replace the gradient
                seen[name] = [g.item() for g in grad_inputs if g is not None]
            return hook

        for node in (z.grad_fn, z.grad_fn.next_functions[0][0], y.grad_fn):
            node.register_hook(record(node.name()))
        y.register_hook(lambda g: seen.update({"arriving at y": g.item()}))
        z.backward()
        seen
    """)
    session.verdict(sent["MulBackward0"] == [9.0, 9.0] and sent["arriving at y"] == 19.0,
                    "y receives 1 (from +) and 9 + 9 (from y*y): their sum 19 = 2y + 1")
    session.verdict(sent["PowBackward0"] == [114.0], "PowBackward0 multiplies 19 by its local derivative 2x = 6: 114")

    session.step("The same as formulas: gradcli trace --symbolic")
    session.say("""gradcli writes each node's local derivative from its table (language/derivatives.py),
        names every value (u1 for the unnamed y*y) and every gradient (g_y arrives at y), and
        evaluates each formula where torch ran, beside what torch's hooks saw:""")
    session.run("""
        import gradcli

        chain = gradcli.trace("y = x**2; z = y*y + y; z", ["x=3.0"], symbolic=True).symbolic
        for node in chain.nodes:
            print(f"{node.name:<15} {node.symbol} = {node.definition.text:<8} "
                  f"{node.gradient} = {node.total.text:<12} = {node.numbers.value}  torch {node.numbers.torch}")
            for edge in node.edges:
                print(f"    edge to {edge.input}: local {edge.local.text:<4} gradient {edge.gradient.text:<8} = {edge.numbers.value}")
    """)
    chain = session.namespace["chain"]
    y = next(node for node in chain.nodes if node.symbol == "y")
    session.verdict(len(y.terms) == 3 and y.total.text == "2*g_u1*y + g_z",
                    "three terms meet at y: g_z + g_u1*y + g_u1*y = 2*g_u1*y + g_z")
    session.verdict(all(node.numbers.agrees for node in chain.nodes), "every formula's value equals what torch's hooks saw")

    session.step("Composed, and checked against sympy")
    leaf = chain.leaves[0]
    session.run("""
        leaf = chain.leaves[0]
        print("composed:", leaf.composed.text, "=", leaf.expanded.text)
        print("sympy:   ", leaf.reference.text)
        print(leaf.proof_words)
    """)
    session.verdict(leaf.proof == "simplify", "simplify(composed − sympy's derivative) = 0")
    session.shell("trace", "y = x**2; z = y*y + y; z", "--var", "x=3.0", "--symbolic")
