"""`gradcli demo grad`: `torch.autograd.grad`, which returns gradients instead of storing them.

The second half of the tutorial's mechanics: grad(t2, t1) gives dt2/dt1 and leaves
`t1.grad` alone; it too frees the graph unless retain_graph=True; it does not accumulate
(the tutorial says it does, which is wrong); and with create_graph=True the gradient is
itself a graph, so a second grad gives the second derivative.
"""

from __future__ import annotations

from typing import Any

from .runner import Session

SUMMARY = "torch.autograd.grad(): gradients returned, .grad untouched, retain_graph, create_graph for 2nd derivatives"


def run(session: Session, **_: Any) -> None:
    session.step("grad() returns the gradient")
    session.say("""torch.autograd.grad(outputs, inputs) returns d(outputs)/d(inputs) as a tuple, one
        tensor per input. It is how you differentiate with respect to some tensors only, and it
        leaves every .grad attribute as it was:""")
    session.run("""
        import torch

        torch.manual_seed(0)
        t1 = torch.randn(3, 3, requires_grad=True)
        t2 = t1.pow(2).sum()
        (g,) = torch.autograd.grad(t2, t1)
        g
    """)
    session.verdict(session.run("torch.allclose(g, 2 * t1)"), "grad(t2, t1) returns 2·t1")
    untouched = session.run("print(t1.grad)")
    session.verdict(untouched is None and session.namespace["t1"].grad is None, "t1.grad stays None")

    session.step("It frees the graph too, unless retain_graph=True")
    session.say("""Like backward(), grad() frees what the graph saved once it has used it:""")
    session.run("torch.autograd.grad(t2, t1)", raises=RuntimeError)
    session.say("""With retain_graph=True the graph survives for another call. Each call returns a
        fresh gradient: unlike backward(), grad() does not add to anything, so two calls give 2·t1
        twice, not 4·t1.""")
    session.run("""
        t2 = t1.pow(2).sum()
        (g_first,) = torch.autograd.grad(t2, t1, retain_graph=True)
        (g_second,) = torch.autograd.grad(t2, t1)
        torch.equal(g_first, g_second)
    """)
    session.verdict(
        session.run("torch.allclose(g_second, 2 * t1)"), "a second grad() through a retained graph gives 2·t1 again"
    )

    session.step("create_graph=True: the gradient as a graph, and the second derivative")
    session.say("""By default the returned gradient is a plain tensor with no history, so it cannot be
        differentiated again:""")
    session.run("""
        t3 = t1.pow(3).sum()
        (g,) = torch.autograd.grad(t3, t1)
        torch.autograd.grad(g.sum(), t1)
    """, raises=RuntimeError)
    session.say("""create_graph=True records the backward computation itself. The gradient of
        sum(t1³) is 3·t1², now with a grad_fn, and differentiating its sum gives 6·t1: the Hessian
        times a vector of ones, here the Hessian's diagonal as each element depends on its own
        input only. gradgradcheck (see `gradcli demo swish`) tests exactly this second pass.""")
    session.run("""
        t3 = t1.pow(3).sum()
        (g,) = torch.autograd.grad(t3, t1, create_graph=True)
        g.grad_fn.name()
    """)
    session.run("""
        (g2,) = torch.autograd.grad(g.sum(), t1)
        g2
    """)
    session.verdict(
        session.run("torch.allclose(g, 3 * t1**2) and torch.allclose(g2, 6 * t1)"),
        "the first derivative is 3·t1², the second 6·t1",
    )

    session.step("The same with gradcli trace --mode grad")
    session.say("""gradcli's trace runs autograd.grad passes too, and with create_graph it walks the
        gradient's own graph and differentiates through it:""")
    checks = session.run("""
        import gradcli

        spec = f"t1={t1.tolist()}"
        result = gradcli.trace("t1.pow(3).sum()", [spec], mode="grad", repeat=2, retain_graph=True, create_graph=True)
        t1_64 = t1.detach().double()  # trace works in float64
        grads = [torch.tensor(p.grads["t1"], dtype=torch.float64) for p in result.passes]
        second = torch.tensor(result.gradient_graphs[0].second, dtype=torch.float64)
        {
            "both passes return 3·t1²": all(torch.allclose(g, 3 * t1_64**2) for g in grads),
            "t1.grad stays None": result.leaves[0].grad is None,
            "the second derivative is 6·t1": torch.allclose(second, 6 * t1_64),
        }
    """)
    session.verdict(all(checks.values()), "trace --mode grad: 3·t1² on each pass, t1.grad None, second derivative 6·t1")
    session.say("""From the shell:""")
    session.shell("trace", "t1.pow(3).sum()", "--var", "t1=randn(3,3)", "--mode", "grad", "--create-graph")
