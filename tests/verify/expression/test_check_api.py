"""`gradcli.check` from Python: the result is the command's, described once.

The text a person reads is render/check.py's alone. `str()` of the public API's result is
what `gradcli check` prints on a pipe (100 columns, no colour), and `to_json()` its --json
document, byte for byte: a user's `assert result.ok, str(result)` shows what the command
shows, and the two cannot drift apart.
"""

from __future__ import annotations

import json
import pytest
from typer.testing import CliRunner

import gradcli
from gradcli.cli.app import app
from gradcli.render.plain import PLAIN_WIDTH
from gradcli.verify.expression.check import check as library_check
from gradcli.verify.expression.result import CheckResult
from gradcli.words import problem_sentences

# Three results the text has to carry whole: a wrong elementwise gradient with its cause,
# rewrite and fix; an exact-mode (coupled elements) overflow; and a second-order agreement.
CASES = [
    ("log(1+exp(x))", ["x=linspace(-1000,1000,1001)"], 1, 1),
    ("log(sum(exp(x), dim=1)).sum()", ["x=[[800.0, 1.0], [1.0, 2.0]]"], 1, 1),
    ("x*y + sin(x*y)", [], 2, 0),
]


def same(a: dict, b: dict) -> bool:
    """Equal documents, nan included (nan != nan, but both dump as NaN)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def command(expression: str, var: list[str], order: int, *extra: str):
    runner = CliRunner(env={"COLUMNS": str(PLAIN_WIDTH), "NO_COLOR": "1"})
    args = ["check", expression, *(a for v in var for a in ("--var", v)), "--order", str(order), "--seed", "7"]
    return runner.invoke(app, [*args, *extra], catch_exceptions=False)


@pytest.mark.parametrize(("expression", "var", "order", "status"), CASES, ids=[c[0] for c in CASES])
def test_str_of_the_result_is_what_the_command_prints(expression, var, order, status):
    result = gradcli.check(expression, var, order=order, seed=7)
    printed = command(expression, var, order)
    assert printed.exit_code == status and result.ok is (status == 0)
    assert str(result) + "\n" == printed.stdout


@pytest.mark.parametrize(("expression", "var", "order", "status"), CASES, ids=[c[0] for c in CASES])
def test_to_json_is_the_commands_json_document(expression, var, order, status):
    # --json shows the derivatives as differentiated (no simplify), so the API is asked the same.
    result = gradcli.check(expression, var, order=order, seed=7, simplify=False)
    printed = command(expression, var, order, "--json")
    assert printed.exit_code == status
    assert result.to_json() + "\n" == printed.stdout
    doc = json.loads(result.to_json())  # nan and inf as the strings docs/json.md gives
    assert doc["expression"] == expression and doc["ok"] is result.ok and doc["problems"] == problem_sentences(result.problems)


def test_the_public_result_is_the_library_result_with_its_text():
    result = gradcli.check("log(1+exp(x))", {"x": "linspace(-1000,1000,1001)"}, seed=7)
    plain = library_check("log(1+exp(x))", {"x": "linspace(-1000,1000,1001)"}, seed=7)
    assert isinstance(result, CheckResult) and type(plain) is CheckResult
    # Same data: the whole JSON document (every field but the pretty print and the points),
    # and those two.
    assert result.pretty == plain.pretty and result.points.keys() == plain.points.keys()
    assert all(bool((result.points[k] == plain.points[k]).all()) for k in plain.points)
    assert same(result.as_dict(), plain.as_dict())
    # The library result carries no text of its own: its only description is the renderer's.
    assert "__str__" not in vars(CheckResult)
    lines = str(result).splitlines()
    assert lines[0] == "check log(1+exp(x))   (float64, order 1, elementwise)"
    assert lines[-1] == "PROBLEM: " + problem_sentences(result.problems)[0]
    assert "fix: softplus(x)" in lines
    assert any(line.startswith("cause of d/dx at ") and "overflow" in line for line in lines)


def test_a_wrong_range_of_one_element_says_one_point():
    # The line under the table counted "(1 points)"; the problem sentence already said "(1 point)".
    result = gradcli.check("log(sum(exp(x), dim=1)).sum()", {"x": "[[800.0, 1.0], [1.0, 2.0]]"}, seed=7)
    lines = str(result).splitlines()
    assert "x: autograd gives nan for x[0, 0], exact 1 (1 point)" in lines
    assert lines[-1] == "PROBLEM: autograd gives nan for x[0, 0] where the true d/dx is 1 (1 point)"


def test_every_result_shows_its_report_as_the_last_line_of_a_notebook_cell():
    # Jupyter shows _repr_html_ when there is one, else repr(): a Check, a FunctionCheck and a
    # Grads showed their dataclass fields (a FunctionCheck's ran to 14,000 characters of tensors).
    import html

    import torch
    from torch import nn

    from models import Cube

    torch.manual_seed(0)
    results = [
        gradcli.check("x*sigmoid(x)", seed=0),
        gradcli.check_function(Cube, ref="x**3"),
        gradcli.grads(nn.Linear(3, 2), torch.randn(4, 3), loss="out.pow(2).mean()"),
    ]
    for result in results:
        shown = result._repr_html_()
        assert shown.startswith("<pre>") and shown.endswith("</pre>")
        assert html.unescape(shown[len("<pre>"):-len("</pre>")]) == str(result)


def test_var_is_parsed_once_at_the_boundary_and_read_as_parsed(monkeypatch):
    """--var's texts (and the Python API's dict) are parsed once, by check itself; the
    refusals, the notes, the points and the fixes' rerun all read the parsed values."""
    from gradcli.interpret import var_spec

    parsed: list[str] = []
    real = var_spec._parse_spec
    monkeypatch.setattr(var_spec, "_parse_spec", lambda name, text: parsed.append(name) or real(name, text))
    # a wrong gradient (so the fixes rerun check) with an integer list (so the note is written)
    result = library_check("log(1+exp(x)) + y", {"x": "linspace(-1000, 1000, 3)", "y": "[1, 2, 3]"}, seed=1)
    assert not result.ok and any("the integers written ([1, 2, 3])" in note for note in result.notes)
    assert sorted(parsed) == ["x", "y"]


def test_the_python_dicts_names_are_names_not_text_to_split():
    # {"x=1": "2"} was joined into "x=1=2" and read as x with the value "1=2"
    with pytest.raises(gradcli.GradcliError, match="'x=1' is not a valid variable name"):
        library_check("x*x", {"x=1": "2"})
    same_values = library_check("x*x", {"x": "linspace(-1, 1, 5)"}, seed=3), library_check("x*x", ["x=linspace(-1, 1, 5)"], seed=3)
    assert same(same_values[0].as_dict(), same_values[1].as_dict())
