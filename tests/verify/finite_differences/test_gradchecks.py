"""run_gradcheck: torch's finite-difference checks, reproducible with the check's seed."""

from __future__ import annotations


import torch

from gradcli.verify.finite_differences.gradchecks import SLOW_MODE_MAX_ELEMENTS, run_gradcheck
from gradcli.verify.function.userfile import load_function
from paths import FIXTURES

SIN_FLIPPED = load_function(f"{FIXTURES / 'functions.py'}:SinFlipped")


class RecordingSin(torch.autograd.Function):
    """sin whose backward keeps the gradients it is handed (random ones, in gradgradcheck)."""

    seen: list[torch.Tensor] = []

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        RecordingSin.seen.append(g.detach().clone())
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)


def _inputs() -> list[torch.Tensor]:
    # Past SLOW_MODE_MAX_ELEMENTS gradcheck's fast mode projects the Jacobian on random vectors.
    return [torch.linspace(-2, 2, SLOW_MODE_MAX_ELEMENTS + 50, dtype=torch.float64)]


def _gradients_seen(seed: int) -> list[torch.Tensor]:
    RecordingSin.seen = []
    verdict = run_gradcheck(RecordingSin.apply, [torch.linspace(-2, 2, 20, dtype=torch.float64)], seed=seed, second=True)
    assert verdict.ok is True
    return RecordingSin.seen


def test_the_seed_decides_gradgradchecks_random_output_gradients():
    first, again, other = _gradients_seen(3), _gradients_seen(3), _gradients_seen(4)
    assert first and len(first) == len(again) == len(other)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0])


def test_a_wrong_backward_fails_in_fast_mode():
    verdict = run_gradcheck(SIN_FLIPPED.apply, _inputs(), seed=0)
    assert verdict.fast_mode and verdict.ok is False
    assert "Jacobian mismatch" in verdict.message


def test_the_callers_random_stream_is_left_as_it_was():
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    run_gradcheck(SIN_FLIPPED.apply, _inputs(), seed=5, second=True)
    assert torch.equal(torch.rand(3), expected)


def test_a_correct_function_passes_both_orders():
    x = [torch.linspace(-2, 2, 20, dtype=torch.float64)]
    assert run_gradcheck(torch.sin, x, seed=0).ok is True
    assert run_gradcheck(torch.sin, x, seed=0, second=True).ok is True
