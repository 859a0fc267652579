"""exact/maxima.py: a chunk's error maxima updated at its 50-digit points only are the
maxima measured over all points at once, exactly (values, nan and inf, the first worst point).

The reference here is the definition, written the plain way: the truth with every override
written in, each point's error, one maximum and one argmax over the whole tensor.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

import gradcli
from gradcli.exact import compare, maxima


def whole(got, ref, counted, overrides, atol, rtol):
    """The largest absolute and relative errors and the first worst point, in one pass."""
    truth = ref.clone()
    if overrides:
        truth[torch.tensor(list(overrides))] = torch.tensor(list(overrides.values()), dtype=torch.float64)
    size = truth.abs()
    err = (got - truth).abs()
    err = torch.where(torch.isnan(err), math.inf, err)
    scaled = torch.where(counted, err / (atol + rtol * size), -1.0)
    rel_ok = counted & (size > atol)
    max_rel = float((err[rel_ok] / size[rel_ok]).max()) if rel_ok.any() else 0.0
    return float(err[counted].max()), max_rel, int(scaled.argmax())


def first_pass(got, ref, counted, atol, rtol, chunk):
    """Each chunk's maxima against `ref`, as compare's first pass measures them."""
    measured = {}
    for start in range(0, got.numel(), chunk):
        g, r = got[start:start + chunk], ref[start:start + chunk]
        size = r.abs()
        measured[start] = maxima.chunk_errors(counted[start:start + chunk], (g - r).abs(), atol + rtol * size, size, atol)
    return measured


# Few distinct values, so that errors tie and a 50-digit point often held a chunk's maximum.
POOL = [0.0, 1.0, -1.0, 0.5, 2.0, 1e-300, 1e300, -3.0, math.nan, math.inf, -math.inf]
FINITE = [v for v in POOL if math.isfinite(v)]


def value(rng: random.Random, pool: list[float]) -> float:
    # Magnitudes apart, so that the largest error and the largest error over its tolerance
    # are often at different points.
    return rng.choice(pool) if rng.random() < 0.6 else rng.gauss(0, 2) * 10.0 ** rng.randint(-3, 3)


@pytest.fixture
def calls(monkeypatch):
    """How often each way was taken: updated at the points, or the chunk measured again."""
    seen = {"updated": 0, "measured": 0}
    updated, measured = maxima._updated, maxima._measured

    def counting_updated(*args):
        found = updated(*args)
        seen["updated" if found is not None else "measured"] += 1
        return found

    monkeypatch.setattr(maxima, "_updated", counting_updated)
    monkeypatch.setattr(maxima, "_measured", measured)
    return seen


def same(a, b) -> bool:
    return repr(a) == repr(b)  # nan == nan, and -0.0 apart from 0.0


def test_random_cases_equal_one_pass_over_all_points(monkeypatch, calls):
    rng = random.Random(20261130)
    for case in range(3000):
        chunk = rng.randint(1, 9)
        monkeypatch.setattr(maxima, "CHUNK", chunk)
        n = rng.randint(1, 40)
        got = torch.tensor([value(rng, POOL) for _ in range(n)], dtype=torch.float64)
        ref = torch.tensor([value(rng, POOL) for _ in range(n)], dtype=torch.float64)
        if rng.random() < 0.3:  # agreeing everywhere: every error ties at 0
            got = ref.clone()
        before = torch.tensor([rng.random() < 0.8 for _ in range(n)])
        overrides = {i: value(rng, FINITE) for i in rng.sample(range(n), rng.randint(0, n))}
        if rng.random() < 0.2:  # the 50-digit value confirms the float64 one
            overrides = {i: ref[i].item() if math.isfinite(ref[i].item()) else v for i, v in overrides.items()}
        recounted = {i for i in overrides if before[i]}
        counted = before.clone()
        if overrides:
            counted[torch.tensor(list(overrides))] = True
        if not counted.any():
            continue
        atol, rtol = rng.choice([(1e-7, 1e-5), (0.0, 1e-3), (1e-12, 0.0), (0.5, 0.5)])
        measured = first_pass(got, ref, before, atol, rtol, chunk)
        found = maxima.errors(got, ref, counted, overrides, atol, rtol, measured, recounted)
        expected = whole(got, ref, counted, overrides, atol, rtol)
        assert same(found, expected), (case, got, ref, before, overrides, atol, rtol, chunk)
    # Both ways were taken many times, so both were compared with the definition.
    assert calls["updated"] > 1000 and calls["measured"] > 1000, calls


def test_a_sampled_point_that_held_the_maximum_makes_the_chunk_measured_again(monkeypatch, calls):
    monkeypatch.setattr(maxima, "CHUNK", 4)
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], dtype=torch.float64)
    got = ref + torch.tensor([0.0, 3e-6, 1e-6, 0.0, 2e-6, 0.0, 0.0, 1e-6], dtype=torch.float64)
    counted = torch.ones(8, dtype=torch.bool)
    # Point 1 held chunk 0's maximum against the float64 value; its 50-digit value moves
    # its error to 0, so the chunk's maximum is point 2's. Point 5 of chunk 1 gets the
    # largest error of all.
    overrides = {1: 2.0 + 3e-6, 5: 6.0 - 5e-6}
    measured = first_pass(got, ref, counted, 1e-7, 1e-5, 4)
    found = maxima.errors(got, ref, counted, overrides, 1e-7, 1e-5, measured, {1, 5})
    assert calls == {"updated": 1, "measured": 1}
    assert found[2] == 5 and found[0] == pytest.approx(5e-6, rel=1e-9)
    assert same(found, whole(got, ref, counted, overrides, 1e-7, 1e-5))


@pytest.mark.parametrize("expression, var, order", [
    ("x*sigmoid(x)", None, 1),
    ("x*sigmoid(x)", None, 2),
    ("sqrt(x)", "linspace(-2, 2, 4001)", 1),  # outside the domain, infinite at 0
    ("abs(x) + relu(x - 1)", "linspace(-3, 3, 6001)", 1),  # kinks at 0 and 1
    ("log(x)", "linspace(0, 5, 4001)", 2),
    ("exp(x)/(1 + exp(x))", "linspace(-1000, 1000, 5001)", 1),  # nan in float64: arbitrated
    ("1e20*(sqrt(x**2+1) - x)", "linspace(1e7, 1e9, 3001)", 1),  # both sides cancel: wrong
    ("where(x > 0, x**3, -x)", "linspace(-1, 1, 3001)", 2),
])
def test_checks_give_what_one_pass_over_all_points_gives(monkeypatch, expression, var, order):
    monkeypatch.setattr(compare, "CHUNK", 1000)  # several chunks, each holding sampled points
    monkeypatch.setattr(maxima, "CHUNK", 1000)
    options = {"points": 5000} if var is None else {"var": {"x": var}}
    found = gradcli.check(expression, order=order, seed=7, explain=False, **options)

    def plain(got, ref, counted, overrides, atol, rtol, measured, recounted):
        return whole(got, ref, counted, overrides, atol, rtol)

    monkeypatch.setattr(compare, "errors", plain)
    expected = gradcli.check(expression, order=order, seed=7, explain=False, **options)
    assert found.comparisons and len(found.comparisons) == len(expected.comparisons)
    assert sum(c.sampled_exact for c in found.comparisons) > 0
    for ours, theirs in zip(found.comparisons, expected.comparisons):
        assert same(ours.as_dict(), theirs.as_dict())
    assert found.ok == expected.ok
