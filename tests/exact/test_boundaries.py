"""Branch boundaries and kinks found with torch, for when the symbolic side is skipped.

gradcheck's finite differences straddle a point where the function jumps or bends and
report a mismatch that says nothing about autograd; the symbolic side keeps such points
out of gradcheck, and when it is skipped (sympy timed out: a 2,500-example property run
found `where(y < -y, ...)` at y = 0 reported as a wrong gradient) torch finds them instead.
"""

from __future__ import annotations

import pytest
import torch

import gradcli
from gradcli.pipeline import load
from gradcli.verify.expression import exact_mode as check_exact
from gradcli.exact import elementwise
from gradcli.exact.boundaries import any_near_boundary, near_boundaries
from gradcli.exact.symbolic import SymbolicTimeout


def mask(text: str, **values: list[float]) -> list[bool]:
    program, library = load(text)
    points = {name: torch.tensor(v, dtype=torch.float64) for name, v in values.items()}
    size = len(next(iter(values.values())))
    return near_boundaries(program, library, points, size).tolist()


@pytest.mark.parametrize(
    ("text", "x", "expected"),
    [
        ("where(x > 0, x, 0.1 * x)", [-1.0, 0.0, 1e-9, 0.5], [False, True, True, False]),
        ("where(x < -x, x, 2 * x)", [-0.5, 0.0, 0.5], [False, True, False]),
        ("maximum(x, 1 - x)", [0.0, 0.5, 0.50000001, 2.0], [False, True, True, False]),
        ("clamp(x, -1, 1)", [-1.0, 0.0, 1.0, 3.0], [True, False, True, False]),
        ("clamp(x, max=2)", [2.0, 0.0], [True, False]),
        ("abs(x) + relu(x - 3)", [0.0, 1.0, 3.0, 5.0], [True, False, True, False]),
        ("leaky_relu(x)", [0.0, -2.0], [True, False]),  # a library body: its where is measured
        ("sin(x) * exp(x)", [0.0, 1.0], [False, False]),
        ("h = exp(x); where(h <= h, h, x) + maximum(x, x)", [0.0, 1.0], [False, False]),
    ],
)
def test_points_at_or_next_to_a_boundary_are_marked(text, x, expected):
    assert mask(text, x=x) == expected


def test_the_boundaries_come_from_the_op_rows(monkeypatch):
    """boundaries.py holds no list of ops: a row's `meets` and `kinks` are all it reads."""
    import dataclasses

    from gradcli.language import ops

    assert mask("maximum(x, 1 - x)", x=[0.5, 2.0]) == [True, False]
    monkeypatch.setitem(ops.OPS, "maximum", dataclasses.replace(ops.OPS["maximum"], meets=()))
    monkeypatch.setitem(ops.OPS, "sin", dataclasses.replace(ops.OPS["sin"], kinks=(2.0,)))
    assert mask("maximum(x, 1 - x)", x=[0.5, 2.0]) == [False, False]
    assert mask("sin(x)", x=[0.5, 2.0]) == [False, True]


def test_the_distance_is_relative_to_the_size_of_the_values():
    # 1e-4 relative: 1e6 + 50 is next to 1e6, 0.5 + 50 is not next to 0.5.
    assert mask("where(x > 1000000, x, 0)", x=[1e6 + 50, 1e6 + 500]) == [True, False]


def test_a_coupled_program_marks_any_element():
    program, library = load("softmax(where(x > 0, x, 1 + 0 * x), dim=0)")
    assert any_near_boundary(program, library, {"x": torch.tensor([0.0, 1.0], dtype=torch.float64)})
    assert not any_near_boundary(program, library, {"x": torch.tensor([0.5, 1.0], dtype=torch.float64)})


def _symbolic_times_out(*args, **kwargs):
    raise SymbolicTimeout("the symbolic work took longer than 30 s")


def test_elementwise_check_keeps_boundary_points_out_of_gradcheck(monkeypatch):
    monkeypatch.setattr(elementwise, "formulas", _symbolic_times_out)
    # where(...) jumps at 0: finite differences there give ~5e5, autograd 0 or 1.
    result = gradcli.check("where(x > 0, x, 1.0)", {"x": "[-1.0, 0.0, 0.5, 2.0]"}, seed=0)
    assert result.ok, str(result)
    assert result.gradcheck.ok is True and result.gradcheck.points == 3
    assert any("1 of 4 points are at or next to a branch boundary" in note for note in result.notes)


def test_elementwise_gradcheck_runs_on_every_point_away_from_boundaries(monkeypatch):
    monkeypatch.setattr(elementwise, "formulas", _symbolic_times_out)
    result = gradcli.check("sqrt(x) * where(x > 10, 2.0, 1.0)", {"x": "[1.0, 4.0, 9.0]"}, seed=0)
    assert result.gradcheck.ok is True and result.gradcheck.points == 3


def test_exact_check_does_not_run_gradcheck_across_a_boundary(monkeypatch):
    monkeypatch.setattr(check_exact, "exact_formulas", _symbolic_times_out)
    # x[0] sits on the boundary: held fixed; x[1] is still checked (kinks are per element).
    result = gradcli.check("softmax(where(x > 0, x, 1 + 0 * x), dim=0)", {"x": "[0.0, 1.0]"}, seed=0)
    assert result.ok, str(result)
    assert result.gradcheck.ok is True and result.gradcheck.points == 1
    assert any("1 of 2 elements are at or next to a kink" in note for note in result.notes)
    result = gradcli.check("softmax(where(x > 0, x, 1 + 0 * x), dim=0)", {"x": "[0.0, 0.0]"}, seed=0)
    assert result.gradcheck.ok is None
    assert "branch boundary or a kink" in result.gradcheck.message


def test_exact_check_away_from_boundaries_runs_gradcheck(monkeypatch):
    monkeypatch.setattr(check_exact, "exact_formulas", _symbolic_times_out)
    result = gradcli.check("softmax(where(x > 0, x, 1 + 0 * x), dim=0)", {"x": "[0.5, 1.0]"}, seed=0)
    assert result.gradcheck.ok is True
