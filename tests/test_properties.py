"""Property-based agreement: for random programs built from the operations table (values
inside every operation's domain, see strategies.py), `gradcli trace --json` gives the
gradients a hand-written torch computation gives, and `gradcli check` raises no false alarm.

Example counts: 450 trace + 40 check (order 1) + 12 check (order 2) = 502 in CI (a check
costs a gradcheck and sympy's derivative, ~1 s); with GRADCLI_SLOW=1
(`GRADCLI_SLOW=1 pytest -m slow tests/test_properties.py`) the slow tests run 3,000 trace +
2,500 check + 300 check --order 2 = 5,800 on deeper programs. A failure prints the program and its --var options: replay it with
`gradcli check "<program>" --var ...`.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from gradcli.cli import app
from gradcli.language.ops import OPS
from op_intervals import COVERED
from strategies import Case, examples, programs

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
    assert losses == {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "binary_cross_entropy_with_logits"}
    assert set(OPS) - losses <= COVERED, f"operations the strategies never generate: {sorted(set(OPS) - COVERED)}"


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


@settings(max_examples=450, **SETTINGS)
@given(programs())
def test_trace_gradients_equal_a_direct_torch_computation(case: Case):
    assert_trace_agrees(case)


@settings(max_examples=40, **SETTINGS)
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
