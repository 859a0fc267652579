"""exact/regions.py: the cancellation mask (where a sum lost most of its digits) computed in
numpy is, bit for bit, the mask torch's operations gave, on values that overflow, vanish,
cancel exactly or are nan."""

from __future__ import annotations

import sympy
import torch

from gradcli.exact import regions


def torch_cancellation(self, expr, active):
    """The mask as torch computed it before (the definition)."""
    terms = [a for a in expr.args if a.free_symbols]
    if not terms:
        return
    largest = self.value(terms[0]).abs()
    for term in terms[1:]:
        largest = torch.maximum(largest, self.value(term).abs())
    lost = (self.value(expr).abs() <= regions.CANCELLATION * largest) & (largest > 0) & (largest < torch.inf)
    self._mark(self.cancel, lost, active)


x, y = sympy.symbols("x y", real=True)
EXPRESSIONS = [
    sympy.diff(x / (1 + sympy.exp(-x)), x),  # x*sigmoid(x)'s derivative: a sum of two terms
    10**20 * (sympy.sqrt(x**2 + 1) - x),  # cancels for large x
    sympy.sin(x) - x + x**3 / 6,  # cancels near 0
    sympy.exp(x) - sympy.exp(-x) + x * y - y,  # overflows to inf - inf = nan for |x| > 710
    sympy.Piecewise((x - y, x > y), (x + y, True)),  # sums under a branch mask (active)
    sympy.log(x**2 + 1) - sympy.log(y**2 + 1),  # exactly 0 where |x| == |y|
]


def points(size: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    special = torch.tensor([0.0, -0.0, 1.0, -1.0, 1e-320, -5e-324, 1e300, -1e300, 710.0, -800.0, 1e8, 3.0],
                           dtype=torch.float64)
    drawn = torch.randn(size, generator=generator, dtype=torch.float64) * 10.0 ** torch.randint(
        -8, 9, (size,), generator=generator
    )
    xs = torch.cat([special, drawn])[:size]
    ys = torch.where(torch.arange(size) < size // 2, xs, -xs)  # |x| == |y|: exact cancellations
    ys[::3] = torch.randn(len(ys[::3]), generator=generator, dtype=torch.float64)  # and not
    return {x: xs, y: ys}


def test_the_cancellation_mask_is_the_one_torch_gave(monkeypatch):
    monkeypatch.setattr(regions, "CHUNK", 700)  # several chunks, marked into slices in place
    for seed, expr in enumerate(EXPRESSIONS):
        env = points(2500, seed)
        derivatives = [sympy.diff(expr, x), sympy.diff(expr, y)]
        *_, ours = regions.analyse_all(expr, derivatives, env, 2500)
        monkeypatch.setattr(regions._Walker, "_cancellation", torch_cancellation)
        *_, theirs = regions.analyse_all(expr, derivatives, env, 2500)
        monkeypatch.undo()
        monkeypatch.setattr(regions, "CHUNK", 700)
        assert torch.equal(ours, theirs), expr
        assert 0 < int(ours.sum()) < 2500 or expr == EXPRESSIONS[0], (expr, int(ours.sum()))
