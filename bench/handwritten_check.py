"""What a user writes instead of `gradcli check "x*sigmoid(x)" --points N`.

    python bench/handwritten_check.py 10000000

The same three truths gradcli checks, written directly and vectorised: autograd's gradient at
N float64 points drawn uniformly from [-5, 5] (plus the special points gradcli always adds),
sympy's derivative of the same function lambdified to torch and evaluated on all of them,
compared with gradcli's float64 tolerances, and torch.autograd.gradcheck on 100,000 evenly
spaced points in fast mode (gradcli's GRADCHECK_MAX_POINTS, fast mode past 300 elements).
Prints the worst errors; exit status 1 if anything disagrees.
"""

from __future__ import annotations

import sys

import sympy
import torch

RTOL, ATOL = 1e-7, 1e-10
GRADCHECK_POINTS = 100_000
SPECIAL = (0.0, 1.0, -1.0, 0.5, -0.5, 10.0, -10.0, 100.0, -100.0, 1000.0, -1000.0)


def main(count: int) -> int:
    generator = torch.Generator().manual_seed(0)
    drawn = -5.0 + 10.0 * torch.rand(count, generator=generator, dtype=torch.float64)
    x = torch.cat([torch.tensor(SPECIAL, dtype=torch.float64), drawn]).requires_grad_(True)

    # autograd
    (grad,) = torch.autograd.grad((x * torch.sigmoid(x)).sum(), x)

    # the exact derivative
    s = sympy.Symbol("x", real=True)
    derivative = sympy.diff(s / (1 + sympy.exp(-s)), s)
    exact = sympy.lambdify(s, derivative, modules="torch")(x.detach())

    finite = torch.isfinite(exact)  # exp(-x) overflows for x < -709 in float64
    error = (grad - exact).abs()[finite]
    worst = float(error.max())
    bad = int((error > ATOL + RTOL * exact[finite].abs()).sum())
    print(f"d/dx = {derivative}")
    print(f"{x.numel():,} points, max abs error {worst:.3g}, {bad} disagree, {int((~finite).sum())} not finite")

    # finite differences
    index = torch.linspace(0, x.numel() - 1, GRADCHECK_POINTS).round().long().unique()
    sample = x.detach()[index].clone().requires_grad_(True)
    passed = torch.autograd.gradcheck(lambda t: t * torch.sigmoid(t), (sample,), fast_mode=True, raise_exception=False)
    print(f"gradcheck on {sample.numel():,} points: {'passed' if passed else 'FAILED'}")
    return 0 if bad == 0 and passed else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000))
