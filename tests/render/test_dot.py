"""`--dot`: Graphviz DOT of the traced graph that Graphviz's own `dot` accepts."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from gradcli import trace
from gradcli.render.dot import quote, trace_dot

needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None,
    reason="Graphviz's `dot` is not installed (apt-get install -y graphviz) so DOT cannot be parsed here",
)


def run_dot(text: str) -> str:
    """Graphviz's canonical form of `text` (raises if dot rejects it)."""
    done = subprocess.run(["dot", "-Tcanon"], input=text, capture_output=True, text=True, check=True, timeout=60)
    assert done.stderr == ""
    return done.stdout


def test_nodes_edges_and_styles():
    text = trace_dot(trace("h = x*x; (h*y).sum()", ["x=[1.0, 2.0]", "y=3.0"]))
    assert text.startswith("digraph autograd {") and text.rstrip().endswith("}")
    # forward direction, as torchviz draws it: input -> operation
    assert "  n1 -> n0;" in text and "  n0 -> output;" in text
    assert re.search(r'n3 \[label="x\\n\[2\]", fillcolor=lightblue', text)  # a leaf
    assert re.search(r'n2 \[label="h = MulBackward0", fillcolor=lightgrey\]', text)  # a named node
    assert re.search(r'n0 \[label="SumBackward0", fillcolor=darkolivegreen1\]', text)  # the output's node
    # saved tensors: orange ellipses on dashed edges; a saved leaf names the leaf
    assert re.search(r'n2_self \[shape=ellipse, fillcolor=orange, .*label="_saved_self\\n= x"\]', text)
    assert re.search(r'n1_self \[.*label="_saved_self\\n= h"\]', text)
    assert "n1_self -> n1 [style=dashed, arrowhead=none];" in text
    assert text.count("n3 -> n2;") == 2  # x*x: two edges from the same leaf, as in next_functions


def test_quote_escapes():
    assert quote('a "b" \\ c\nd') == '"a \\"b\\" \\\\ c\\nd"'


@needs_dot
@pytest.mark.parametrize(
    "expression, variables",
    [
        ("h = x*x; (h*y).sum()", ["x=[1.0, 2.0]", "y=3.0"]),
        ("(x @ y).sum()", ["x=randn(2,2)", "y=randn(2,2)"]),
        ("h = x; h = h*h + h; h = h*h + h; h.sum()", ["x=0.5"]),
        ("swish(x, beta=1.5).sum()", ["x=[1.0, 2.0]"]),
        ("x", ["x=1.0"]),
    ],
)
def test_graphviz_parses_it(expression, variables):
    result = trace(expression, variables, seed=0)
    canon = run_dot(trace_dot(result))
    for node in result.graph.nodes:
        assert re.search(rf"^\s*{node.id}\s*\[", canon, re.M), node.id


@needs_dot
def test_dot_to_a_file_and_to_stdout(cli, tmp_path):
    path = tmp_path / "graph.dot"
    result = cli("trace", "sin(x).sum()", "--var", "x=[1.0]", "--dot", str(path))
    assert result.exit_code == 0
    assert f"DOT written to {path}" in result.stdout
    run_dot(path.read_text())
    printed = cli("trace", "sin(x).sum()", "--var", "x=[1.0]", "--dot", "-")
    assert printed.exit_code == 0
    assert printed.stdout == path.read_text()  # only the DOT on stdout
    run_dot(printed.stdout)


def test_unwritable_dot_path_is_exit_2(cli, tmp_path):
    result = cli("trace", "sin(x).sum()", "--var", "x=[1.0]", "--dot", str(tmp_path / "missing" / "g.dot"))
    assert result.exit_code == 2
    assert "cannot write the DOT file" in result.stderr


@pytest.mark.parametrize("name", ["graph.jpg", "graph.JPEG", "graph.gif", "graph.webp"])
def test_a_picture_format_gradcli_does_not_draw_is_exit_2(cli, tmp_path, name):
    # --dot graph.jpg wrote DOT text into graph.jpg: a file no image viewer opens, reported as written.
    path = tmp_path / name
    result = cli("trace", "sin(x).sum()", "--var", "x=[1.0]", "--dot", str(path))
    assert result.exit_code == 2 and result.stdout == ""
    assert "draws .svg, .png or .pdf" in result.stderr and not path.exists()
