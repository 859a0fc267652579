"""`gradcli demo swish --buggy`: the classic mistakes, each caught by the check that catches it.

The classes live in gradcli.demos.swish_buggy; here each one is shown and put through the
check that exposes it: a plain backward call for the errors Python raises, gradcheck for a
wrong first derivative, gradgradcheck for a wrong second derivative (both through
gradcli's check_function, which names the wrong entries and the likely cause), and an
in-place change for a tensor kept outside save_for_backward. Every caught mistake is a failed check, so the
demo exits with status 1.
"""

from __future__ import annotations

from typing import Any

from .runner import Session, source_path

#: The β a missing-β bug is checked at when the demo runs with β = 1, where it hides.
BETA_FOR_MISSING_FACTOR = 1.5


def run(session: Session, beta: float) -> None:
    session.step("The classic mistakes, and the check that catches each")
    session.say("""Each class below differs from Swish in one mistake. Most come from a widely copied
        tutorial whose backward had three bugs at once; they are fixed here one at a time. Each
        check states what a correct Function does; ✗ marks the mistake it caught.""")
    session.run("""
        from gradcli.demos.swish_buggy import (
            SwishCallsTensor, SwishCtxInput, SwishNoBeta, SwishSavedSigma, SwishTutorial, SwishWrongSign,
        )

        x3 = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    """)
    _undefined_input(session)
    _calls_tensor(session)
    _wrong_formula(session)
    _missing_beta(session, beta)
    _saved_sigma(session)
    _ctx_input(session)


def _undefined_input(session: Session) -> None:
    session.say("""(a) The tutorial's backward uses `input` without assigning it. That is no NameError:
        Python finds its built-in function input(), and the first arithmetic on it fails as soon
        as backward runs. Any backward call catches it:""")
    session.show(_bug("SwishTutorial").backward)
    error = session.run("SwishTutorial.apply(x3, BETA).sum().backward()", raises=TypeError)
    session.verdict(not isinstance(error, TypeError), "SwishTutorial's backward runs")


def _calls_tensor(session: Session) -> None:
    session.say("""(b) With input read back from ctx.saved_tensors, the next bug surfaces:
        tmp(1 - tmp), meant as tmp * (1 - tmp), calls the tensor tmp.""")
    session.show(_bug("SwishCallsTensor").backward)
    error = session.run("SwishCallsTensor.apply(x3, BETA).sum().backward()", raises=TypeError)
    session.verdict(not isinstance(error, TypeError), "SwishCallsTensor's backward runs")


def _wrong_formula(session: Session) -> None:
    session.say("""(c) A backward that runs is not yet right. Here the parenthesis became (1 + tmp).
        gradcheck catches it; check_function says which entries are wrong, with the value
        finite differences (and sympy) expected and the value backward gave:""")
    session.show(_bug("SwishWrongSign").backward)
    result = session.run("""
        result = check_function(SwishWrongSign, INPUTS, ref=REF)
        print(result)
        result.gradcheck.ok
    """)
    session.verdict(result is True, "SwishWrongSign passes gradcheck")


def _missing_beta(session: Session, beta: float) -> None:
    checked_at = beta if beta != 1.0 else BETA_FOR_MISSING_FACTOR
    session.say("""(d) The derivative of x·σ(x) used for x·σ(βx): the factor β before x·σ(1−σ) is
        missing.""" + (f""" At β = 1 that factor is 1 and the bug is invisible, so a check must also
        try another β; here β = {checked_at:g}.""" if beta == 1.0 else ""))
    session.show(_bug("SwishNoBeta").backward)
    result = session.run(f"""
        result = check_function(SwishNoBeta, {{**INPUTS, "beta": "{checked_at!r}"}}, ref=REF)
        print(result)
        result.gradcheck.ok
    """)
    session.verdict(result is True, f"SwishNoBeta passes gradcheck at β = {checked_at:g}")


def _saved_sigma(session: Session) -> None:
    session.say("""(e) σ(βx) computed in forward and saved for backward. The first derivative is
        right, so gradcheck passes; but forward runs without recording a graph, so to autograd the
        saved σ is a constant, and differentiating backward misses σ's own derivative. Only the
        second-order check, gradgradcheck, sees it:""")
    session.show(_bug("SwishSavedSigma"))
    session.run("""
        result = check_function(SwishSavedSigma, INPUTS, ref=REF, order=2)
        print(result)
    """)
    checked = session.namespace["result"]
    session.verdict(checked.gradcheck.ok is True, "SwishSavedSigma passes gradcheck (its first derivative is right)")
    session.verdict(checked.gradgradcheck.ok is True, "SwishSavedSigma passes gradgradcheck")
    session.say("""The same from the shell:""")
    session.shell("check-function", f"{source_path('swish_buggy')}:SwishSavedSigma", "--ref", "swish(input, beta)", "--order", "2")


def _ctx_input(session: Session) -> None:
    session.say("""(f) The input kept as ctx.input instead of ctx.save_for_backward. Every check above
        passes; the harm shows when the input changes in place between forward and backward.
        save_for_backward records the tensor's version and refuses a changed one; an attribute is
        not watched, so backward silently uses the new values:""")
    session.show(_bug("SwishCtxInput").forward)
    session.run("""
        h = x3.clone()
        y = Swish.apply(h, BETA)
        h.mul_(10)  # an in-place change after forward used h
        y.sum().backward()
    """, raises=RuntimeError)
    wrong = session.run("""
        h = x3.clone()
        y = SwishCtxInput.apply(h, BETA)
        h.mul_(10)
        (grad,) = torch.autograd.grad(y.sum(), x3)
        print("backward gave  ", [round(v, 4) for v in grad.tolist()])
        print("the derivative ", [round(df_at(v), 4) for v in x3.tolist()])
        torch.allclose(grad, torch.tensor([df_at(v) for v in x3.tolist()], dtype=torch.float64))
    """)
    session.verdict(wrong is True, "SwishCtxInput gives the right gradient after an in-place change (or refuses, as Swish does)")


def _bug(name: str) -> Any:
    from . import swish_buggy

    return getattr(swish_buggy, name)
