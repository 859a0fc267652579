"""`gradcli trace` from the shell: the walk-throughs, exit statuses, JSON, folding, help."""

from __future__ import annotations

import json
import re
import shlex
import shutil

import pytest

from gradcli.cli import app
from paths import ROOT


def test_walkthrough_backward_on_randn(cli):
    result = cli("trace", "x.pow(2).sum()", "--var", "x=randn(3,3)", "--seed", "0")
    assert result.exit_code == 0
    out = result.stdout
    for section in ("Leaves", "Graph", "Passes", "Gradients"):
        assert f"\n{section}\n" in out
    assert "n1 PowBackward0" in out and "_saved_exponent: 2" in out
    assert "_saved_self: the leaf x [3, 3]" in out
    assert "torch::autograd::AccumulateGrad  variable x" in out
    assert "seed 0" in out
    assert "\x1b[" not in out  # plain text off a terminal


def test_second_pass_without_retain_graph_exit_1(cli):
    result = cli("trace", "x.pow(2).sum()", "--var", "x=[1.0, 2.0]", "--repeat", "2")
    assert result.exit_code == 1
    assert "pass 2: torch.autograd.backward(retain_graph=False, create_graph=False)  FAILED" in result.stdout
    assert "Trying to backward through the graph a second time" in result.stdout
    assert "fix: --retain-graph" in result.stdout


def test_retain_graph_accumulates(cli):
    result = cli("trace", "x.pow(2).sum()", "--var", "x=[1.0, 2.0]", "--repeat", "2", "--retain-graph", "--json")
    assert result.exit_code == 0
    passes = json.loads(result.stdout)["passes"]
    assert [p["grads"]["x"] for p in passes] == [[2.0, 4.0], [4.0, 8.0]]
    assert [p["retain_graph"] for p in passes] == [True, True]


def test_zero_grad(cli):
    result = cli("trace", "x.pow(2).sum()", "--var", "x=[1.0, 2.0]", "--repeat", "2", "--retain-graph", "--zero-grad", "--json")
    document = json.loads(result.stdout)
    assert [p["grads"]["x"] for p in document["passes"]] == [[2.0, 4.0], [2.0, 4.0]]
    assert document["leaves"][0]["grad"] == [2.0, 4.0]


def test_mode_grad_leaves_grad_none(cli):
    result = cli("trace", "x.pow(2).sum()", "--var", "x=[1.0, 2.0]", "--mode", "grad", "--wrt", "x")
    assert result.exit_code == 0
    assert "x.grad: None" in result.stdout
    assert "d(output)/dx: [2.0, 4.0]" in result.stdout
    assert "does not write the leaves' .grad" in result.stdout


def test_create_graph_prints_the_gradients_graph_and_6x(cli):
    result = cli("trace", "(x**3).sum()", "--var", "x=[1.0, 2.0]", "--create-graph")
    assert result.exit_code == 0
    out = result.stdout
    assert "Graph of the gradient of x (create_graph)" in out
    assert ".grad of x: [3.0, 12.0]  (grad_fn torch::autograd::CopyBackwards)" in out
    assert "d/dx sum(gradient) = [6.0, 12.0]" in out
    document = json.loads(cli("trace", "(x**3).sum()", "--var", "x=[1.0, 2.0]", "--create-graph", "--json").stdout)
    (graph,) = document["gradient_graphs"]
    assert graph["second"] == [6.0, 12.0] and graph["root"] == "dx_n0"
    assert "PowBackward0" in [n["name"] for n in graph["nodes"]]


def test_sqrt_flow_exit_1(cli):
    result = cli("trace", "sqrt(x).sum()", "--var", "x=[0.0, 1.0]", "--flow")
    assert result.exit_code == 1
    assert "ORIGIN" in result.stdout


def test_non_scalar_output_exit_2_suggests_grad_output(cli):
    result = cli("trace", "x*x", "--var", "x=[1.0, 2.0]")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "not a scalar" in result.stderr and "--grad-output ones" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_input_exit_2(cli):
    assert cli("trace", "x.pow(2", "--var", "x=1.0").exit_code == 2
    assert cli("trace", "x.sum()", "--var", "x=[1.0]", "--mode", "sideways").exit_code == 2
    assert cli("trace", "x.sum()", "--var", "x=[1.0]", "--max-nodes", "0").exit_code == 2
    both = cli("trace", "x.sum()", "--var", "x=[1.0]", "--json", "--dot", "-")
    assert both.exit_code == 2 and "both want stdout" in both.stderr


def test_json_is_the_only_thing_on_stdout(cli):
    result = cli("trace", "h = x*x + x; h.sum()", "--json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert set(document) >= {"expression", "result", "nodes", "leaves", "passes"}
    assert "flow" not in document
    assert document["leaves"][0] == {
        "name": "x", "shape": [], "dtype": "float64", "spec": "0.5", "defaulted": True,
        "requires_grad": True, "value": 0.5, "grad": 2.0,  # d/dx (x^2 + x) = 2x + 1
    }
    assert document["passes"][0]["error"] is None
    assert next(n for n in document["nodes"] if n["label"] == "h")["name"] == "AddBackward0"


def test_json_writes_nonfinite_numbers_as_strings(cli):
    result = cli("trace", "(x*y).sum()", "--var", "x=[1.0, inf]", "--var", "y=[nan, 2.0]", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["leaves"][0]["value"] == [1.0, "inf"]
    assert document["leaves"][0]["grad"] == ["nan", 2.0]
    assert document["result"]["value"] == "nan"
    assert document["passes"][0]["nonfinite"] == ["x", "y"]
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout


def test_json_error_object(cli):
    result = cli("trace", "x.exp().sum()", "--var", "x=[1.0]", "--repeat", "2", "--json")
    assert result.exit_code == 1
    error = json.loads(result.stdout)["passes"][1]["error"]
    assert error["type"] == "RuntimeError" and error["fix"] == "--retain-graph"
    assert error["message"].startswith("Trying to backward through the graph a second time")


def test_retain_grad_and_the_non_leaf_explanation(cli):
    result = cli("trace", "h = x*x; g = h.exp(); g.sum()", "--var", "x=[1.0]", "--retain-grad", "h")
    assert result.exit_code == 0
    assert "h.grad: [2.718]  (kept by --retain-grad)" in result.stdout
    assert "g.grad: None  (g is an intermediate, not a leaf" in result.stdout
    assert cli("trace", "x.sum()", "--var", "x=[1.0]", "--retain-grad", "q").exit_code == 2


def test_dag_node_printed_once_then_referenced(cli):
    result = cli("trace", "(x*x).sum()", "--var", "x=[3.0]")
    out = result.stdout
    assert out.count("n2 torch::autograd::AccumulateGrad") == 1
    assert "↑ n2 AccumulateGrad (x), shown above" in out


def test_program_file_and_folding(cli, tmp_path):
    program = tmp_path / "chain.txt"
    program.write_text("h = x\n" + "h = sin(h)\n" * 100 + "h.sum()\n")
    result = cli("trace", f"@{program}", "--var", "x=0.5", "--max-nodes", "10")
    assert result.exit_code == 0
    assert "… 92 of 102 nodes not shown" in result.stdout
    assert "… n10 SinBackward0 (h) and what it leads to, folded" in result.stdout
    assert len(result.stdout.splitlines()) < 60


def test_doubling_dag_from_a_file(cli, tmp_path):
    program = tmp_path / "dag.txt"
    program.write_text("h = x\n" + "h = h*h + h\n" * 40 + "h.sum()\n")
    result = cli("trace", f"@{program}", "--var", "x=0.001", "--json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert len(document["nodes"]) == 2 * 40 + 2
    grad = document["leaves"][0]["grad"]
    # the chain rule by hand: d h_{k+1} = (2 h_k + 1) d h_k
    h, d = 0.001, 1.0
    for _ in range(40):
        h, d = h * h + h, (2 * h + 1) * d
    assert grad == pytest.approx(d, rel=1e-12)


def test_long_chain_from_a_file_walks_without_recursion(cli, tmp_path):
    program = tmp_path / "chain.txt"
    program.write_text("h = x\n" + "h = sin(h)\n" * 3000 + "h.sum()\n")
    result = cli("trace", f"@{program}", "--var", "x=0.5", "--json")
    assert result.exit_code == 0
    nodes = json.loads(result.stdout)["nodes"]
    assert len(nodes) == 3002 and nodes[-1]["variable"] == "x"


@pytest.mark.slow
def test_twenty_thousand_operation_chain(cli, tmp_path):
    program = tmp_path / "chain.txt"
    program.write_text("h = x\n" + "h = sin(h)\n" * 20000 + "h.sum()\n")
    result = cli("trace", f"@{program}", "--var", "x=0.5", "--json")
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["nodes"]) == 20002


def _help_examples():
    from typer.testing import CliRunner

    text = CliRunner().invoke(app, ["trace", "--help"]).stdout
    # comments=True drops a trailing "# exit 1: ..." note.
    return [
        shlex.split(line.strip(), comments=True)[1:]
        for line in text.splitlines()
        if line.strip().startswith("gradcli trace ")
    ]


def _draws_a_picture(args: list[str]) -> bool:
    return any(a == "--dot" and b.lower().endswith((".svg", ".png", ".pdf")) for a, b in zip(args, args[1:]))


def test_help_examples_run(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples may write files (--dot graph.svg) and read examples/
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    examples = _help_examples()
    assert len(examples) >= 6
    for args in examples:
        if _draws_a_picture(args) and shutil.which("dot") is None:
            continue  # Graphviz's dot is not on PATH (a fresh machine): test_graphviz checks the refusal
        result = cli(*args)
        expected = 1 if "sqrt(x).sum()" in args else 0
        assert result.exit_code == expected, (args, result.stdout, result.stderr)
        if "--json" in args:
            json.loads(result.stdout)
        if args[-2:] == ["--dot", "-"]:
            assert re.match(r"digraph autograd \{", result.stdout)


def test_help_names_every_reason_for_exit_1(cli):
    # --flow's cancellation finding (README: examples/nan_causes.py:Cancellation, exit 1) and a
    # --symbolic DIFFERS exit 1 too; the help named only autograd errors and nan/inf.
    text = " ".join(cli("trace", "--help").stdout.split())
    for reason in ("raised an autograd error", "produced a nan/inf gradient", "a --symbolic formula DIFFERS from torch",
                   "--flow on code finds a gradient that cancellation made inaccurate"):
        assert reason in text
