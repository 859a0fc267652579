"""Property-based agreement: for random programs built from the operations table (values
inside every operation's domain, see strategies.py), `gradcli trace --json` gives the
gradients a hand-written torch computation gives, and `gradcli check` raises no false alarm.

Example counts: 200 trace + 20 check (order 1) + 12 check (order 2) = 232 in CI (a check
costs a gradcheck and sympy's derivative, ~1 s); with GRADCLI_SLOW=1
(`GRADCLI_SLOW=1 pytest -m slow tests/language/test_properties.py`) the slow tests run 3,000 trace +
2,500 check + 300 check --order 2 = 5,800 on deeper programs. A failure prints the program and its --var options: replay it with
`gradcli check "<program>" --var ...`.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

import gradcli
from gradcli.cli import app
from gradcli.errors import GradcliError
from gradcli.language.ops import OPS
from op_intervals import COVERED
from strategies import (
    Case, Hostile, coupled_kinks, equality_masks, examples, extreme_magnitudes, poles_and_edges, programs,
    under_and_overflow,
)

RUNNER = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1"})
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def run(*args: str):
    return RUNNER.invoke(app, list(args), catch_exceptions=False)


def describe(case: Case) -> str:
    options = " ".join(f"--var '{o}'" for o in case.var_options())
    return f"gradcli ... \"{case.text}\" {options}"


def test_the_generator_covers_every_operation():
    # Loss rows take class indices or targets beside the input, outside what random programs
    # of one kind of variable can feed them; test_losses.py checks each against torch and sympy.
    losses = {name for name, op in OPS.items() if op.kind == "loss"}
    assert losses == {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
                      "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"}
    # Shape rows (issue 25) move elements rather than compute them: test_shapes.py holds each
    # against sympy's meaning and its vjp row against torch's backward; cosine_similarity is
    # held against torch and sympy in test_losses.py.
    moving = {name for name, op in OPS.items() if op.kind in ("shape", "split", "constructor")}
    rest = set(OPS) - losses - moving - {"cosine_similarity"}
    assert rest <= COVERED, f"operations the strategies never generate: {sorted(rest - COVERED)}"


def reference_gradients(case: Case) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
    """The output and d(sum of output)/d(variable) computed by hand with torch."""
    leaves = case.leaves()
    output = case.output.fn(leaves)
    grads = torch.autograd.grad(output, list(leaves.values()), torch.ones_like(output), allow_unused=True)
    return output.detach(), dict(zip(leaves, grads))


def assert_trace_agrees(case: Case) -> None:
    args = ["trace", "--json", "--seed", "0"]
    for option in case.var_options():
        args += ["--var", option]
    if case.output.shape != ():
        args += ["--grad-output", "ones"]
    args += ["--", case.text]  # a program may start with '-'
    result = run(*args)
    assert result.exit_code == 0, f"{describe(case)}\nexit {result.exit_code}: {result.stderr}"
    document = json.loads(result.stdout)
    output, grads = reference_gradients(case)
    got = torch.tensor(document["result"]["value"], dtype=torch.float64)
    torch.testing.assert_close(got, output, rtol=1e-12, atol=1e-12, msg=lambda m: f"{describe(case)}\n{m}")
    leaves = {leaf["name"]: leaf for leaf in document["leaves"]}
    assert set(leaves) == set(case.variables)
    for name, expected in grads.items():
        grad = leaves[name]["grad"]
        if expected is None:  # a variable only a dead statement uses: no gradient reaches it
            assert grad is None, f"{describe(case)}: {name}.grad should be None, got {grad}"
            continue
        assert grad is not None, f"{describe(case)}: {name}.grad is None"
        torch.testing.assert_close(
            torch.tensor(grad, dtype=torch.float64), expected, rtol=1e-10, atol=1e-12,
            msg=lambda m, name=name: f"{describe(case)}\nd/d{name}: {m}",
        )


def assert_check_agrees(case: Case, order: int) -> None:
    args = ["check", "--json", "--seed", "0", "--order", str(order)]
    for option in case.var_options():
        args += ["--var", option]
    args += ["--", case.text]
    result = run(*args)
    assert result.exit_code == 0, (
        f"false alarm or refusal: {describe(case)} --order {order}\n"
        f"exit {result.exit_code}\n{result.stderr}\n{result.stdout[:3000]}"
    )
    assert json.loads(result.stdout)["ok"] is True


@settings(max_examples=200, **SETTINGS)  # the slow variant below: 300, or 3,000
@given(programs())
def test_trace_gradients_equal_a_direct_torch_computation(case: Case):
    assert_trace_agrees(case)


@settings(max_examples=20, **SETTINGS)  # the slow variant below: 200, or 2,500
@given(programs(max_depth=3))
def test_check_raises_no_false_alarm(case: Case):
    assert_check_agrees(case, order=1)


@settings(max_examples=12, **SETTINGS)
@given(programs(max_depth=2, max_assignments=1))
def test_check_order_2_raises_no_false_alarm(case: Case):
    assert_check_agrees(case, order=2)


@pytest.mark.slow
@settings(max_examples=examples(300, 3_000), **SETTINGS)
@given(programs(max_depth=5, max_assignments=3))
def test_slow_trace_gradients_equal_a_direct_torch_computation(case: Case):
    assert_trace_agrees(case)


@pytest.mark.slow
@settings(max_examples=examples(200, 2_500), **SETTINGS)
@given(programs(max_depth=4))
def test_slow_check_raises_no_false_alarm(case: Case):
    assert_check_agrees(case, order=1)


@pytest.mark.slow
@settings(max_examples=examples(30, 300), **SETTINGS)
@given(programs(max_depth=3, max_assignments=1))
def test_slow_check_order_2_raises_no_false_alarm(case: Case):
    assert_check_agrees(case, order=2)


# -- Hostile families (issue 18): check is ok exactly when autograd agrees with the truth ---

CHECK_RTOL, CHECK_ATOL = 1e-7, 1e-10  # check's float64 tolerances (verify/expression/check.py)


def _truth_agrees(h: Hostile) -> tuple[bool, list[str]]:
    """Whether torch's autograd agrees with the 50-digit derivative at every point where
    the derivative exists (a where(...) boundary itself is not compared), and where not."""
    import mpmath

    x = torch.tensor(h.values, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(h.torch_fn(x).sum(), x)
    wrong = []
    for xi, gi in zip(h.values, grad.tolist()):
        if h.boundary is not None and xi == h.boundary:
            continue
        with mpmath.workdps(50):
            try:
                truth = h.derivative(mpmath.mpf(xi))
            except (ZeroDivisionError, ValueError):
                continue  # undefined there
            if truth is None or isinstance(truth, mpmath.mpc) or not mpmath.isfinite(truth):
                continue
            truth = float(truth)
        if abs(truth) > 1.7e308:
            continue  # beyond float64: set aside by check too
        if not (math.isfinite(gi) and abs(gi - truth) <= CHECK_ATOL + CHECK_RTOL * abs(truth)):
            wrong.append(f"x={xi!r}: autograd {gi!r}, exact {truth!r}")
    return not wrong, wrong


def assert_hostile_verdict(h: Hostile) -> None:
    agrees, wrong = _truth_agrees(h)
    try:
        result = gradcli.check(h.text, h.var_options(), seed=0)
    except GradcliError as err:  # only when nothing is left to compare
        assert agrees, f"{h.text} at {h.values}: refused ({err}) though autograd is wrong: {wrong}"
        return
    if agrees:
        assert result.ok, f"false alarm: {h.text} at {h.values}\n{result}"
    else:
        assert not result.ok, f"missed: {h.text} at {h.values}: {wrong}\n{result}"


def assert_coupled_verdict(h: Hostile) -> None:
    x = torch.tensor(h.values, dtype=torch.float64, requires_grad=True)
    out = h.torch_fn(x)
    (grad,) = torch.autograd.grad(out, x)
    nan_beside = bool(torch.isnan(grad)[x.detach() != 0].any()) and bool(torch.isfinite(out))
    result = gradcli.check(h.text, h.var_options(), seed=0)
    if nan_beside:
        assert not result.ok, f"missed nan: {h.text} at {len(h.values)} points\n{result}"
    elif "where(x > 0, sqrt" not in h.text and "where(x > 0, log" not in h.text:
        assert result.ok, f"false alarm: {h.text} at {len(h.values)} points\n{result}"


HOSTILE = {"extreme": extreme_magnitudes, "poles": poles_and_edges, "flow": under_and_overflow,
           "masks": equality_masks}


@pytest.mark.parametrize("family", sorted(HOSTILE))
def test_hostile_values_give_the_true_verdict(family):
    @settings(max_examples=10, **SETTINGS)
    @given(HOSTILE[family]())
    def run_family(h: Hostile) -> None:
        assert_hostile_verdict(h)

    run_family()


@settings(max_examples=4, **SETTINGS)
@given(coupled_kinks())
def test_a_coupled_kink_hides_no_nan(h: Hostile):
    assert_coupled_verdict(h)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(HOSTILE))
def test_slow_hostile_values_give_the_true_verdict(family):
    @settings(max_examples=examples(30, 400), **SETTINGS)
    @given(HOSTILE[family]())
    def run_family(h: Hostile) -> None:
        assert_hostile_verdict(h)

    run_family()


@pytest.mark.slow
@settings(max_examples=examples(20, 200), **SETTINGS)
@given(coupled_kinks())
def test_slow_a_coupled_kink_hides_no_nan(h: Hostile):
    assert_coupled_verdict(h)
