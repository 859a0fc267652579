"""check against legitimate expressions written to make it give a wrong verdict.

Each test here failed before its fix; expected values are hand-written.
"""

from __future__ import annotations


def test_no_second_derivative_is_claimed_where_the_first_has_a_kink(cli):
    # sqrt(x**2) is |x|: sympy's d2/dx2 is 0 everywhere, 0 included, but at 0 |x| has no
    # first derivative, so no second one. Before: 'PROBLEM: autograd gives nan for x = 0
    # where the true d2/dx dx is 0'.
    result = cli("check", "sqrt(x**2)", "--var", "x=[-1.5, -0.5, 0.0, 0.5, 1.5]", "--order", "2")
    assert result.exit_code == 0, result.stdout
    assert "kink of d2/dx dx at x=0: autograd gives nan (not compared)" in result.stdout
    assert "kink of d/dx at x=0: autograd gives nan (not compared)" in result.stdout


def test_only_the_kink_point_is_set_apart_at_second_order():
    from gradcli import check

    result = check("x*abs(x)", ["x=[-2.0, -1.0, 0.0, 1.0, 2.0]"], order=2)
    assert result.ok
    (second,) = [c for c in result.comparisons if c.name == "x,x"]
    assert second.kinks == 1 and second.points == 4  # -2, -1, 1, 2 compared: d2 = 2 sign(x)
