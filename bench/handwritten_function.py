"""What a user writes instead of
`gradcli check-function examples/swish.py:Swish --ref "x*sigmoid(x)" --order 2`.

    python bench/handwritten_function.py

Imports the same Function and, on the same 14 float64 inputs gradcli uses by default, runs
torch.autograd.gradcheck and gradgradcheck (slow mode, as gradcli runs them at this size),
then the reference comparison a user writes by hand: sympy's first and second derivatives of
x*sigmoid(x), lambdified to torch, against the forward, the backward (autograd.grad of
sum(out)) and the double backward, with gradcli's float64 tolerances. Prints each verdict;
exit status 1 if anything disagrees.
"""

from __future__ import annotations

import sys
from pathlib import Path

import sympy
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from swish import Swish  # noqa: E402  (examples/swish.py, the Function gradcli checks)

RTOL, ATOL = 1e-7, 1e-10
INPUTS = [-6.0, -4.0, -3.0, -1.5, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0, 3.5, 4.0]


def close(got: torch.Tensor, expected: torch.Tensor) -> tuple[bool, float]:
    error = (got - expected).abs()
    return bool((error <= ATOL + RTOL * expected.abs()).all()), float(error.max())


def main() -> int:
    x = torch.tensor(INPUTS, dtype=torch.float64, requires_grad=True)
    verdicts = {
        "gradcheck": torch.autograd.gradcheck(Swish.apply, (x,), raise_exception=False),
        "gradgradcheck": torch.autograd.gradgradcheck(Swish.apply, (x,), raise_exception=False),
    }

    s = sympy.Symbol("x", real=True)
    f = s * (1 / (1 + sympy.exp(-s)))
    d1, d2 = sympy.diff(f, s), sympy.diff(f, s, 2)
    f_t, d1_t, d2_t = (sympy.lambdify(s, e, modules="torch") for e in (f, d1, d2))

    out = Swish.apply(x)
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(grad.sum(), x)
    value = x.detach()
    for name, got, expected in (("forward", out, f_t(value)), ("first derivative", grad, d1_t(value)),
                                ("second derivative", second, d2_t(value))):
        ok, worst = close(got.detach(), expected)
        verdicts[f"{name} vs sympy"] = ok
        print(f"{name} vs sympy: {'ok' if ok else 'DIFFERS'} (max abs err {worst:.3g})")
    for name, ok in list(verdicts.items())[:2]:
        print(f"{name}: {'passed' if ok else 'FAILED'}")
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
