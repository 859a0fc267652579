"""trace --symbolic: for each program the composed gradient equals sympy's derivative (proved
by simplify, or numerically where said so), and every node's and edge's formula, evaluated
at the traced values, equals the gradient torch's hooks saw there."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from gradcli.cli.app import app
from gradcli.tracing.trace import trace
from gradcli.words import problem_sentences
from paths import ROOT

PROGRAMS = [
    ("h = x*sigmoid(x); y = h*h + h; y.sum()", ["x=[0.5, 2.0]"]),
    ("y = x**2; z = y*y + y; z.sum()", ["x=[1.0, -0.5]"]),
    ("(x*y + sin(x*y)).sum()", ["x=[0.5, 2.0]", "y=1.5"]),
    ("where(x > 1, x*x, 2/x).mean()", ["x=[0.5, 2.0, 3.0]"]),
    ("(softmax(x, dim=0) * w).sum()", ["x=[1.0, 2.0, 3.0]", "w=[0.5, -1.0, 2.0]"]),
    ("(x @ y).sum()", ["x=[[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]", "y=[1.0, -2.0, 0.5]"]),
    ("sum(x*x, dim=0).prod()", ["x=[[1.0, 2.0], [0.5, 3.0]]"]),
    ("logsumexp(x, dim=0) + log_softmax(x, dim=0).sum()", ["x=[1.0, 2.0, 3.0]"]),
    ("(2/x + 2**x - (3 - x)).sum()", ["x=[0.5, 2.0]"]),
    ("h = exp(x); h = h*h + h; h = h*h + h; h.sum()", ["x=[-0.5, 0.1]"]),
    ("tanh(x).sum() + (x*x).mean()", ["x=[0.3, -1.2]"]),
    ("sqrt(x*x + 1).sum()", ["x=[0.5, -2.0]"]),
    ("log(1 + exp(x)).sum()", ["x=[-1.0, 0.5]"]),
    ("softplus(x).sum()", ["x=[-1.0, 0.5, 25.0]"]),
    ("relu(x - 0.3).sum()", ["x=[0.1, 1.0]"]),
    ("abs(x).sum()", ["x=[-1.0, 2.0]"]),
    ("clamp(x, min=-0.5, max=0.5).sum()", ["x=[-1.0, 0.2, 0.9]"]),
    ("maximum(x, y).sum()", ["x=[1.0, 2.0]", "y=[2.0, 1.0]"]),
    ("minimum(x, 0.5*x*x).sum()", ["x=[1.0, 3.0]"]),
    ("pow(x, y).sum()", ["x=[0.5, 1.5]", "y=[2.0, 0.5]"]),
    ("(x / y).sum()", ["x=[1.0, 2.0]", "y=[0.5, 4.0]"]),
    ("swish(x).sum()", ["x=[-1.0, 0.5]"]),
    ("h = x*y; g = h*x; (g + h).sum()", ["x=[0.5, 1.5]", "y=[2.0, -1.0]"]),
    ("(x @ w).sum()", ["x=[[1.0, 2.0], [0.5, -1.0]]", "w=[[0.3, -0.2], [1.0, 0.5]]"]),
    ("(softmax(x, dim=1) * w).sum()", ["x=[[1.0, 2.0, 0.5], [0.1, -1.0, 2.0]]", "w=[[1.0, 2.0, 3.0], [0.5, 0.5, -1.0]]"]),
    ("(log_softmax(x, dim=0) * y).sum()", ["x=[1.0, 0.0, -1.0]", "y=[0.2, 0.3, 0.5]"]),
    ("mean(x*x, dim=1).sum()", ["x=[[1.0, 2.0], [0.5, 3.0]]"]),
    ("erf(x).sum()", ["x=[0.3, -0.7]"]),
    ("(atan(x) * asinh(x)).sum()", ["x=[0.3, -0.7]"]),
    ("(x - x.mean()).pow(2).sum()", ["x=[1.0, 2.0, 4.0]"]),
    ("h = sin(x); (h*h + cos(x)*h).sum()", ["x=[0.3, 2.0]"]),
    ("(expm1(x) + log1p(x)).sum()", ["x=[0.3, 2.0]"]),
    ("(x * y).sum()", ["x=[1.0, 2.0]", "y=3.0"]),
    ("where(x > 0, x, 0.1*x).sum()", ["x=[-1.0, 2.0]"]),
]


def _checked(result):
    chain = result.symbolic
    assert chain is not None
    assert result.problems == []
    compared = 0
    for node in chain.nodes:
        assert node.numbers.agrees is True, (node.node, node.name)
        compared += 1
        for edge in node.edges:
            if edge.index >= 0:
                assert edge.numbers.agrees is True, (node.node, edge.index)
                compared += 1
    torch_grads = {leaf.name: leaf.grad for leaf in result.leaves}
    for leaf in chain.leaves:
        assert leaf.proof in ("simplify", "numeric"), (leaf.variable, leaf.proof_words)
        assert leaf.numbers.agrees is True
        assert torch.allclose(torch.tensor(leaf.numbers.value), torch.tensor(torch_grads[leaf.variable]),
                              rtol=1e-9, atol=1e-12)
    return chain, compared


@pytest.mark.parametrize("expression, variables", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_composed_gradient_is_sympys_and_every_number_is_torchs(expression, variables):
    result = trace(expression, variables, symbolic=True)
    chain, compared = _checked(result)
    # Every node torch ran outside an operation's own inner nodes was compared.
    inner = sum(len(node.inner) for node in chain.nodes)
    accumulate = sum(1 for n in result.graph.nodes if n.variable is not None)
    assert len(chain.nodes) == len(result.graph.nodes) - accumulate - inner
    assert compared >= len(chain.nodes)


def test_at_least_thirty_programs_cover_shared_nodes_where_matmul_reductions_softmax():
    texts = " ".join(p[0] for p in PROGRAMS)
    assert len(PROGRAMS) >= 30
    for needed in ("where(", "@", "softmax(", "sum(x*x, dim=0)", "logsumexp", "h*h"):
        assert needed in texts


def test_the_shared_node_sums_its_paths():
    chain = trace("h = x*sigmoid(x); y = h*h + h; y.sum()", ["x=[0.5, 2.0]"], symbolic=True).symbolic
    (h,) = [node for node in chain.nodes if node.symbol == "h"]
    assert len(h.terms) == 3  # h*h uses h twice, + h once
    assert h.total.text == "2*g_u2*h + g_y"
    (sigmoid,) = [node for node in chain.nodes if node.name == "SigmoidBackward0"]
    assert sigmoid.edges[0].local.text == "u1*(1 - u1)"
    assert sigmoid.edges[0].uses == ["_saved_result"]
    assert chain.leaves[0].proof == "simplify"


def test_a_starting_gradient_is_named_v_and_taken_from_torch():
    result = trace("h = x*x; h.exp()", ["x=[1.0, 2.0]"], symbolic=True, grad_output="[1.0, -2.0]")
    chain, _ = _checked(result)
    assert chain.seed.text == "v"
    assert chain.leaves[0].numbers.value == pytest.approx([2 * 1 * torch.e, -2 * 4 * torch.exp(torch.tensor(4.0)).item()])


def test_the_doubling_dag_stays_in_named_values():
    levels = 40
    program = "; ".join(["h = x*x + x"] + ["h = h*h + h"] * (levels - 1) + ["h"])
    result = trace(program, ["x=-0.25"], symbolic=True)
    chain = result.symbolic
    # One definition per value and per gradient: linear, where expanding doubles each level.
    assert len(chain.definitions) <= 4 * len(result.graph.nodes)
    assert max(len(d.formula.text) for d in chain.definitions) < 40
    (leaf,) = chain.leaves
    assert leaf.proof == "none" and "expands to" in leaf.proof_words
    assert leaf.numbers.agrees is True
    assert all(node.numbers.agrees for node in chain.nodes)


runner = CliRunner()


def _run(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "100", "NO_COLOR": "1"})


def test_cli_symbolic_prints_the_chain_rule():
    out = _run("trace", "h = x*sigmoid(x); y = h*h + h; y.sum()", "--var", "x=[0.5, 2.0]", "--symbolic")
    assert out.exit_code == 0, out.output
    assert "Chain rule (--symbolic)" in out.output
    assert "n5 SigmoidBackward0  ‹sigmoid(x)›   u1 = 1/(1 + exp(-x))" in out.output
    assert "∂u1/∂x = u1*(1 - u1) = [0.235, 0.105] [_saved_result]" in out.output
    assert "(3 paths meet)" in out.output
    assert "proved: simplify(composed − sympy's derivative) = 0" in out.output
    assert "DIFFERS" not in out.output


def test_cli_symbolic_json_carries_text_and_latex():
    out = _run("trace", "(x*x).sum()", "--var", "x=[1.0, 2.0]", "--symbolic", "--json")
    assert out.exit_code == 0
    symbolic = json.loads(out.output)["symbolic"]
    edge = symbolic["nodes"][1]["edges"][0]
    assert edge["local"] == {"text": "x", "latex": "x"}
    assert edge["numbers"] == {"value": [1.0, 2.0], "torch": [1.0, 2.0], "agrees": True}  # each edge of x*x carries x
    assert symbolic["leaves"][0]["proof"] == "simplify"


def test_cli_dot_formulas_label_the_edges():
    out = _run("trace", "(x*x).sum()", "--var", "x=[1.0, 2.0]", "--symbolic", "--dot", "-", "--dot-formulas")
    assert out.exit_code == 0
    assert 'n2 -> n1 [label="g_u1*x", fontsize=9];' in out.output
    refused = _run("trace", "(x*x).sum()", "--dot", "-", "--dot-formulas")
    assert refused.exit_code == 2
    assert "--dot-formulas" in refused.output


def test_elements_mode_refuses_large_tensors():
    out = _run("trace", "softmax(x, dim=0).sum()", "--var", "x=randn(40)", "--symbolic")
    assert out.exit_code == 2
    assert "one symbol per element" in out.output


def test_readme_shows_the_real_output():

    readme = (ROOT / "docs" / "commands" / "trace.md").read_text(encoding="utf-8")
    shown = readme.split("<!-- symbolic-output -->\n```text\n")[1].split("\n```\n<!-- /symbolic-output -->")[0]
    out = _run("trace", "h = x*sigmoid(x); y = h*h + h; y.sum()", "--var", "x=[0.5, 2.0]", "--symbolic")
    assert out.exit_code == 0
    assert out.output[out.output.index("Chain rule (--symbolic)"):].rstrip("\n") == shown


@pytest.mark.parametrize("expression, variables, second", [
    ("(x**3).sum()", ["x=[1.0, 2.0]"], [6.0, 12.0]),
    ("(x*sigmoid(x)).sum()", ["x=[0.5, -1.0]"], None),
])
def test_create_graph_second_derivative_matches_the_gradients_graph(expression, variables, second):
    result = trace(expression, variables, symbolic=True, create_graph=True)
    (leaf,) = result.symbolic.leaves
    (graph,) = result.gradient_graphs
    assert leaf.second_numbers.agrees is True
    assert leaf.second_numbers.torch == graph.second
    if second is not None:
        assert leaf.second_numbers.value == pytest.approx(second, rel=1e-12)
    assert result.problems == []


@pytest.mark.parametrize("args, status", [
    (["x.pow(2).sum()", "--var", "x=[1.0, 2.0]", "--mode", "grad", "--wrt", "x"], 0),
    (["h = x*x; h.sum()", "--var", "x=[1.0, 2.0]", "--mode", "grad", "--wrt", "h"], 0),
    (["x.pow(2).sum()", "--var", "x=[1.0, 2.0]", "--repeat", "2"], 1),  # the second pass fails, as without --symbolic
    (["(sin(x)*exp(x)).sum()", "--var", "x=[1.0, 2.0]", "--dtype", "float32"], 0),
    (["h = x @ x; x.exp().sum()", "--var", "x=[1.0, 2.0]"], 0),  # a dead matmul statement
    (["(x*t).sum()", "--var", "x=[1.0, 2.0]", "--var", "t=randint(0, 5, 2)", "--seed", "1"], 0),
    (["softmax(x, dim=0)", "--var", "x=[1.0, 2.0]", "--grad-output", "randn(2)", "--seed", "3"], 0),
    (["sqrt(x).sum()", "--var", "x=[0.0, 1.0]"], 1),  # inf from SqrtBackward0: formula and torch agree on it
])
def test_options_combine_with_symbolic(args, status):
    out = _run("trace", *args, "--symbolic")
    assert out.exit_code == status, out.output
    assert "Traceback" not in out.output
    assert "DIFFERS" not in out.output
    assert "Chain rule (--symbolic)" in out.output


def test_a_wrong_local_derivative_is_pointed_at(monkeypatch):
    """What a wrong backward inside a graph looks like: the node's formula and torch disagree
    there (DIFFERS, exit 1), and the leaf's composition no longer equals sympy's derivative."""
    from gradcli.language import derivatives

    wrong = derivatives.Local("sin", {"input": derivatives.Partial(lambda sp, x, out: sp.sin(x), ("_saved_self",))})
    monkeypatch.setitem(derivatives.LOCALS, "sin", wrong)
    result = trace("(sin(x)*x).sum()", ["x=[0.5, 2.0]"], symbolic=True)
    (sin,) = [node for node in result.symbolic.nodes if node.name == "SinBackward0"]
    assert sin.edges[0].numbers.agrees is False
    assert sin.numbers.agrees is True  # what arrives at it is still right: the error is on its edge
    (leaf,) = result.symbolic.leaves
    assert leaf.proof == "differs" and leaf.numbers.agrees is False
    assert any("SinBackward0" in p for p in problem_sentences(result.problems))
    out = _run("trace", "(sin(x)*x).sum()", "--var", "x=[0.5, 2.0]", "--symbolic")
    assert out.exit_code == 1
    assert "DIFFERS" in out.output


def test_too_many_nodes_is_a_limit_error(monkeypatch):
    from gradcli.chain import rule

    monkeypatch.setattr(rule, "NODES_MAX", 3)
    out = _run("trace", "h = sin(x); h = sin(h); h = sin(h); h.sum()", "--symbolic")
    assert out.exit_code == 2
    assert "--symbolic writes formulas for at most 3 graph nodes; this graph has 5" in out.output
    assert "Traceback" not in out.output
