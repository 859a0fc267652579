"""`gradcli demo chain-rule`: the seed's example, y = x**2; z = y*y + y, node by node."""

from __future__ import annotations

from typer.testing import CliRunner

from gradcli.cli.app import app
from gradcli.demos import run_demo
from gradcli.demos.runner import Code


def test_chain_rule_demo_numbers_and_formulas():
    run = run_demo("chain-rule")
    assert run.ok and len(run.verdicts) == 6
    assert run.namespace["x"].grad.item() == 114.0  # 2x(2y + 1) at x = 3, y = 9
    assert run.namespace["seen"] == {
        "AddBackward0": [1.0, 1.0], "MulBackward0": [9.0, 9.0], "arriving at y": 19.0, "PowBackward0": [114.0],
    }
    chain = run.namespace["chain"]
    (y,) = [node for node in chain.nodes if node.symbol == "y"]
    assert [t.text for t in y.terms] == ["g_z", "g_u1*y", "g_u1*y"]
    assert y.numbers.value == 19.0 and y.numbers.torch == 19.0
    outputs = "".join(b.output for b in run.blocks if isinstance(b, Code))
    assert "PowBackward0    y = x**2     g_y = 2*g_u1*y + g_z = 19.0  torch 19.0" in outputs
    assert "composed: 2*g_y*x = 4*x**3 + 2*x" in outputs


def test_chain_rule_demo_from_the_cli():
    result = CliRunner().invoke(app, ["demo", "chain-rule"], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert result.exit_code == 0
    assert "All 6 checks agreed." in result.stdout
    assert "$ gradcli trace 'y = x**2; z = y*y + y; z' --var x=3.0 --symbolic" in result.stdout
