"""`gradcli demo swish`: a custom autograd Function end to end, checked three ways.

Swish, f(x) = x·σ(βx) (Ramachandran, Zoph & Le, 2017, arXiv:1710.05941), written as a
`torch.autograd.Function` (gradcli.demos.swish_function), is compared with sympy's
derivative, with torch's own autograd of the formula, and with finite differences
(gradcheck, gradgradcheck). `--buggy` adds the classic mistakes (see swish_mistakes).
"""

from __future__ import annotations

from typing import Any

from . import swish_mistakes
from .runner import Session, source_path

SUMMARY = "Swish x·σ(βx) as a custom autograd.Function, checked against sympy, autograd and gradcheck [--beta B] [--buggy]"
SAMPLES = "[-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0]"
#: Where check_function (and the mistakes) evaluate: a few points, so mismatches stay readable.
CHECK_INPUT = "[-1.0, 0.5, 2.0]"


def run(session: Session, beta: float = 1.0, buggy: bool = False) -> None:
    session.step("The formula, and its derivative from sympy")
    session.say("""Swish is f(x) = x·σ(βx), with σ the logistic sigmoid (Ramachandran, Zoph & Le,
        "Searching for Activation Functions", 2017, arXiv:1710.05941). β = 1 gives SiLU. The paper
        writes its derivative as f'(x) = β·f(x) + σ(βx)·(1 − β·f(x)). sympy differentiates the
        formula on its own and confirms the two agree for every x and β:""")
    session.run("""
        import sympy as sp

        x, beta = sp.symbols("x beta", real=True)
        sigma = 1 / (1 + sp.exp(-beta * x))
        f = x * sigma
        df = sp.diff(f, x)
        sp.simplify(df)
    """)
    difference = session.run("""
        paper = beta * f + sigma * (1 - beta * f)
        sp.simplify(df - paper)
    """)
    session.verdict(difference == 0, "sympy's derivative equals the paper's β·f(x) + σ(βx)·(1 − β·f(x))")

    session.step("The Function")
    session.say("""A custom autograd Function gives forward and backward as static methods. Three
        habits matter: the input is kept with ctx.save_for_backward (so autograd can tell if it
        was changed in place, and frees it with the graph); β is a plain number, kept on ctx,
        and its gradient is None; backward recomputes σ(βx) from the saved input with torch
        operations, so the gradient can itself be differentiated.""")
    session.show(_swish_class())
    session.say(f"""Call it through Swish.apply, never forward directly: apply runs forward with
        gradient recording off and adds a SwishBackward node to the graph. The demo
        runs with β = {beta:g}; `gradcli demo swish --beta B` picks another.""")
    session.run(f"""
        import torch
        import torch.nn.functional as F
        from gradcli.demos.swish_function import Swish

        BETA = {beta!r}
        t = torch.tensor({SAMPLES}, dtype=torch.float64, requires_grad=True)
        y = Swish.apply(t, BETA)
        y
    """)

    session.step("Forward and backward, next to autograd and sympy")
    silu = beta == 1.0
    session.say("""The derivative three ways: the Function's backward; torch's autograd of the formula
        written with torch operations""" + (" and of F.silu (Swish with β = 1)" if silu else "") + """;
        and sympy's derivative evaluated at each point. They agree to the last digit printed:""")
    silu_row = """
            "F.silu": torch.autograd.grad(F.silu(t).sum(), t)[0],""" if silu else ""
    session.run("""
        y_ref = t * torch.sigmoid(BETA * t)
        df_at = sp.lambdify(x, df.subs(beta, BETA), "math")
        grads = {
            "Swish": torch.autograd.grad(y.sum(), t)[0],
            "autograd": torch.autograd.grad(y_ref.sum(), t)[0],
            "sympy": torch.tensor([df_at(v) for v in t.tolist()], dtype=torch.float64),""" + silu_row + """
        }
        print(f"{'x':>6}" + "".join(f"{name:>12}" for name in grads))
        for i, value in enumerate(t.tolist()):
            print(f"{value:6.2f}" + "".join(f"{g[i].item():12.6f}" for g in grads.values()))
    """)
    agree = session.run("""
        torch.allclose(y, y_ref) and all(torch.allclose(g, grads["Swish"]) for g in grads.values())
    """)
    session.verdict(agree, "forward and backward agree with autograd" + (", F.silu" if silu else "") + " and sympy")

    session.step("gradcheck: the backward against finite differences")
    session.say("""torch.autograd.gradcheck perturbs each input element by eps = 1e-6, measures how the
        output moves ((f(x+eps) − f(x−eps)) / 2eps) and compares that numerical Jacobian with the
        one backward computes. In float64 they agree:""")
    first_ok = session.run("""
        from torch.autograd import gradcheck, gradgradcheck

        torch.manual_seed(0)
        x64 = torch.randn(8, dtype=torch.float64, requires_grad=True)
        gradcheck(Swish.apply, (x64, BETA))
    """)
    session.verdict(first_ok, "gradcheck passes in float64")
    session.say("""The same check in float32 warns, then fails, though the Function is right:""")
    session.run("""
        x32 = x64.detach().float().requires_grad_()
        gradcheck(Swish.apply, (x32, BETA), raise_exception=False)
    """)
    session.say("""Why: float32 keeps about 7 significant digits (machine epsilon 1.2e-7), so near 0.5 a
        step of 1e-6 is only 17 units of the last place. 0.5 + 1e-6 rounds to 0.50000101: the step
        actually taken is 1.3% longer than the eps gradcheck divides by, so the measured slope is
        1.3% off, and the values of f it subtracts carry rounding errors of the same order. That is
        far beyond gradcheck's tolerance (atol 1e-5 plus rtol 1e-3 of the value). float64 keeps
        about 16 digits, and the same step leaves about 10 correct ones. Gradient checks therefore
        run in double precision:""")
    session.run("""
        eps = 1e-6
        for dtype in (torch.float32, torch.float64):
            x0 = torch.tensor(0.5, dtype=dtype)
            slope = (Swish.apply(x0 + eps, BETA) - Swish.apply(x0 - eps, BETA)) / (2 * eps)
            print(f"{dtype}: x0 + eps = {(x0 + eps).item():.10f}, slope {slope.item():.10f}")
        print(f"true slope: {df_at(0.5):.10f}")
    """)

    session.step("gradgradcheck: the gradient of the gradient")
    session.say("""Because backward is made of differentiable torch operations, autograd can
        differentiate it (create_graph=True): gradgradcheck checks that second derivative against
        finite differences of the first, and sympy gives the exact value.""")
    second_ok = session.run("gradgradcheck(Swish.apply, (x64, BETA))")
    session.verdict(second_ok, "gradgradcheck passes in float64")
    session.run("""
        (g,) = torch.autograd.grad(Swish.apply(t, BETA).sum(), t, create_graph=True)
        (g2,) = torch.autograd.grad(g.sum(), t)
        d2f_at = sp.lambdify(x, sp.diff(f, x, 2).subs(beta, BETA), "math")
        d2_sympy = torch.tensor([d2f_at(v) for v in t.tolist()], dtype=torch.float64)

        print(f"{'x':>6}{'Swish':>12}{'sympy':>12}")
        for value, a, b in zip(t.tolist(), g2.tolist(), d2_sympy.tolist()):
            print(f"{value:6.2f}{a:12.6f}{b:12.6f}")
    """)
    session.verdict(session.run("torch.allclose(g2, d2_sympy)"), "the second derivative agrees with sympy")

    session.step("All of it in one call: gradcli's check_function")
    session.say("""check_function runs gradcheck and gradgradcheck, builds both Jacobians to name
        any entry that disagrees, and compares forward and backward with a reference expression:
        here gradcli's library function swish(x, beta), x·σ(βx), differentiated by sympy.""")
    session.run(f"""
        from gradcli import check_function

        INPUTS = {{"input": "{CHECK_INPUT}", "beta": repr(BETA)}}
        REF = "swish(input, beta)"
        result = check_function(Swish, INPUTS, ref=REF, order=2)
        print(result)
    """)
    session.verdict(session.namespace["result"].ok, "check_function: Swish agrees at first and second order")
    session.say("""From the shell, on the file that defines the class:""")
    session.shell("check-function", f"{source_path('swish_function')}:Swish", "--ref", "swish(input, beta)", "--order", "2")

    if buggy:
        swish_mistakes.run(session, beta)


def _swish_class() -> Any:
    from .swish_function import Swish

    return Swish
