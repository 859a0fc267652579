"""Naming the likely cause of a wrong backward, from the shape of the mismatch.

Each rule looks at the Jacobian blocks (your backward's against the expected) and says what
a person would conclude by staring at them: the blocks of two inputs swapped, a constant
factor (-1: a flipped sign), right on one side of 0 only, all zeros; and at second order,
right at first order but wrong at second because forward saved a tensor it computed
(a constant to double backward; NOTES.md: Swish saving sigmoid(x)), or @once_differentiable.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .jacobian import InputCheck

_CLOSE = dict(rtol=1e-3, atol=1e-5)


def first_order_causes(checks: Sequence[InputCheck], values: dict[str, torch.Tensor]) -> list[str]:
    causes: list[str] = []
    failing = [c for c in checks if not c.ok]
    swapped = _swapped(checks)
    if swapped:
        a, b = swapped
        causes.append(
            f"backward returns the gradients in the wrong order: what it returns for {a} is the true "
            f"gradient for {b}, and the other way round (return them in forward's input order)"
        )
    for c in failing:
        if swapped and c.name in swapped:
            continue
        cause = _zero(c) or _scaled(c) or _one_side(c, values.get(c.name))
        if cause:
            causes.append(cause)
    return causes


def second_order_causes(
    checks: Sequence[InputCheck], *, first_ok: bool, saved_intermediates: list[str], once_differentiable: bool
) -> list[str]:
    failing = [c for c in checks if not c.ok]
    if not failing or not first_ok:
        return []
    if once_differentiable:
        return [
            "backward is decorated with @once_differentiable, so double backward sees zeros: remove the "
            "decorator and write backward with differentiable torch operations"
        ]
    if saved_intermediates:
        what = ", ".join(saved_intermediates)
        return [
            f"right at first order but wrong at second: forward saved a tensor it computed ({what}) and "
            "backward uses it; to double backward it is a constant, so the second derivative misses how it "
            "depends on the input. Save the inputs and recompute it in backward"
        ]
    if all(bool((c.got == 0).all()) for c in failing):
        return ["double backward gives zeros: backward is not differentiable (computed under no_grad, "
                "or through .detach(), .item() or numpy)"]
    return []


def _swapped(checks: Sequence[InputCheck]) -> tuple[str, str] | None:
    for i, a in enumerate(checks):
        for b in checks[i + 1:]:
            if a.ok and b.ok or a.got.shape != b.got.shape:
                continue
            if torch.allclose(a.got, b.expected, **_CLOSE) and torch.allclose(b.got, a.expected, **_CLOSE):
                return a.name, b.name
    return None


def _zero(c: InputCheck) -> str | None:
    if bool((c.got == 0).all()) and bool((c.expected != 0).any()):
        return f"backward returns zeros (or None) for {c.name}"
    return None


def _scaled(c: InputCheck) -> str | None:
    mask = c.expected.abs() > 1e-6
    if not bool(mask.any()) or not bool(torch.isfinite(c.got).all()):
        return None
    ratio = c.got[mask] / c.expected[mask]
    factor = float(ratio.median())
    if not torch.allclose(ratio, torch.full_like(ratio, factor), rtol=1e-4, atol=1e-6):
        return None
    if not torch.allclose(c.got[~mask], torch.zeros(()).double(), atol=1e-5):
        return None
    if abs(factor + 1) < 1e-4:
        return f"the sign is flipped: backward returns minus the true gradient for {c.name}"
    return f"backward's gradient for {c.name} is {factor:.4g} times the true one: a constant factor is wrong"


def _one_side(c: InputCheck, values: torch.Tensor | None) -> str | None:
    if values is None or c.got.shape[1] != values.numel():
        return None
    x = values.detach().reshape(-1)
    bad = ~((c.got - c.expected).abs() <= 1e-5 + 1e-3 * c.expected.abs()).all(dim=0)
    if not bool(bad.any()):
        return None
    for side, sign in (("x > 0", 1), ("x < 0", -1)):
        on_side = sign * x > 0
        if bool((bad <= on_side).all()) and bool((~bad & ~on_side).any()):
            other = "x < 0" if sign > 0 else "x > 0"
            side = side.replace("x", c.name)
            other = other.replace("x", c.name)
            return f"wrong only where {side} (right where {other}): check the branch of backward for {side}"
    return None


def saved_intermediates(output: Any, inputs: dict[str, torch.Tensor]) -> list[str]:
    """Tensors forward saved that are neither an input nor an output, described."""
    outs = output if isinstance(output, (tuple, list)) else (output,)
    node = getattr(outs[0], "grad_fn", None)
    if node is None:
        return []
    known = [t for t in (*inputs.values(), *outs) if isinstance(t, torch.Tensor)]

    def is_known(t: torch.Tensor) -> bool:
        return any(t.shape == k.shape and t.data_ptr() == k.data_ptr() for k in known)

    found = []
    try:
        saved = list(getattr(node, "saved_tensors", ()) or ())
    except RuntimeError:
        saved = []
    saved += [v for v in vars(node).values() if isinstance(v, torch.Tensor)] if hasattr(node, "__dict__") else []
    for t in saved:
        if isinstance(t, torch.Tensor) and not is_known(t):
            found.append(f"a tensor of shape {list(t.shape)}")
    return found


def is_once_differentiable(cls: type) -> bool:
    backward = getattr(cls, "backward", None)
    code = getattr(backward, "__code__", None)
    return bool(
        hasattr(backward, "__wrapped__") and code is not None and code.co_filename.replace("\\", "/").endswith("torch/autograd/function.py")
    )
