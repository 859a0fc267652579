"""`gradcli demo backward`: `.backward()`, `.grad`, freed graphs, retain_graph, accumulation.

The walk-through follows the first half of the tutorial gradcli grew from: the gradient of
sum(t1²) is 2·t1; a second backward through a freed graph fails; `retain_graph=True` allows
it, and gradients add up in `.grad` until `zero_()`; a non-scalar root needs the gradient
to start from.
"""

from __future__ import annotations

from typing import Any

from .runner import Session

SUMMARY = "tensor.backward(): .grad, a second pass and its error, retain_graph, accumulation, zero_()"


def run(session: Session, **_: Any) -> None:
    session.step("A graph to run backward through")
    session.say("""A leaf tensor created with requires_grad=True has every operation on it recorded.
        t2 is a scalar made from t1; its grad_fn is the last recorded operation.""")
    session.run("""
        import torch

        torch.manual_seed(0)
        t1 = torch.randn(3, 3, requires_grad=True)
        t2 = t1.pow(2).sum()
        t2
    """)

    session.step("backward() fills .grad of the leaves")
    session.say("""t2.backward() walks the graph from t2 back to t1 and stores dt2/dt1 in t1.grad.
        For t2 = sum(t1²) that is 2·t1.""")
    session.run("""
        t2.backward()
        t1.grad
    """)
    session.verdict(session.run("torch.allclose(t1.grad, 2 * t1)"), "t1.grad equals 2·t1")

    session.step("A second backward through the same graph fails")
    session.say("""To save memory, backward frees the values the graph saved for it (pow saved t1)
        as soon as it has used them. Going through the graph again raises:""")
    session.run("t2.backward()", raises=RuntimeError)

    session.step("retain_graph=True keeps the graph, and gradients accumulate")
    session.say("""Build the graph again and ask backward to keep it. Each pass adds its gradient to
        what .grad already holds, so start from no gradient: after two passes t1.grad is 4·t1.""")
    session.run("""
        t1.grad = None
        t2 = t1.pow(2).sum()
        t2.backward(retain_graph=True)
        t2.backward()  # a second pass through the retained graph
        t1.grad
    """)
    session.verdict(session.run("torch.allclose(t1.grad, 4 * t1)"), "two passes accumulate 4·t1")

    session.step("zero_() clears an accumulated gradient")
    session.say("""Accumulation is what lets several losses share one backward each; in a training
        loop it means clearing .grad before every step (optimizer.zero_grad() does it for every
        parameter, by default setting .grad to None).""")
    zeros = session.run("t1.grad.zero_()")
    session.verdict(bool((zeros == 0).all()), "t1.grad is zero after zero_()")

    session.step("A non-scalar root needs the gradient to start from")
    session.say("""backward() on a scalar starts from d(t2)/d(t2) = 1. For a tensor with several
        elements torch cannot guess that starting gradient:""")
    session.run("""
        y = t1.pow(2)
        y.backward()
    """, raises=RuntimeError)
    session.say("""Pass it: backward(gradient=v) computes the vector-Jacobian product vᵀ·J. With v all
        ones that is the gradient of y.sum(), 2·t1 again.""")
    session.run("""
        y.backward(gradient=torch.ones_like(y))
        t1.grad
    """)
    session.verdict(session.run("torch.allclose(t1.grad, 2 * t1)"), "backward(ones) on t1² gives 2·t1")

    session.step("The same passes with gradcli trace")
    session.say("""gradcli's trace builds the expression, walks its graph and runs the passes you ask
        for, keeping each pass's gradients and explaining each error. Three retained passes over
        this same t1 accumulate 2·t1, 4·t1, 6·t1; two passes without retain_graph fail as above:""")
    session.run("""
        import gradcli

        spec = f"t1={t1.tolist()}"
        result = gradcli.trace("t1.pow(2).sum()", [spec], repeat=3, retain_graph=True)
        for p in result.passes:
            grad = torch.tensor(p.grads["t1"], dtype=torch.float64)  # trace works in float64
            print(f"after pass {p.index + 1}: t1.grad / t1 =", (grad / t1.double()).unique().tolist())
    """)
    ratios = [sorted(set(ratio)) for ratio in _ratios(session)]
    session.verdict(ratios == [[2.0], [4.0], [6.0]], "trace: retained passes accumulate 2·t1, 4·t1, 6·t1")
    session.run("""
        error = gradcli.trace("t1.pow(2).sum()", [spec], repeat=2).passes[1].error
        print(error.type, "|", error.explanation, "| fix:", error.fix)
    """)
    failed = session.namespace["error"]
    session.verdict(failed is not None and failed.fix == "--retain-graph", "trace: the second pass without retain_graph fails")
    session.say("""From the shell:""")
    session.shell("trace", "t1.pow(2).sum()", "--var", "t1=randn(3,3)", "--repeat", "3", "--retain-graph")


def _ratios(session: Session) -> list[list[float]]:
    """Each traced pass's t1.grad / t1, elementwise (the verdict reads the same data it printed)."""
    import torch

    t1 = session.namespace["t1"].detach().double()
    passes = session.namespace["result"].passes
    return [(torch.tensor(p.grads["t1"], dtype=torch.float64) / t1).flatten().tolist() for p in passes]
