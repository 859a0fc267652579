"""render/graphviz.py and `trace --dot PATH.svg|png|pdf`: pictures drawn by Graphviz's dot."""

from __future__ import annotations

import shutil

import pytest

from gradcli import trace
from gradcli.errors import LimitError, UsageError
from gradcli.render import graphviz
from gradcli.render.dot import trace_dot

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's `dot` is not installed")

MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF-", ".svg": b"<?xml"}


@needs_dot
@pytest.mark.parametrize("suffix", [".svg", ".png", ".pdf"])
def test_render_each_format(tmp_path, suffix):
    text = trace_dot(trace("h = x*x; (h*y).sum()", ["x=[1.0, 2.0]", "y=3.0"]))
    out = graphviz.render(text, tmp_path / f"graph{suffix}")
    data = out.read_bytes()
    assert data.startswith(MAGIC[suffix]) and len(data) > 3_000
    if suffix == ".svg":
        svg = data.decode("utf-8")
        # Every operation of the graph is drawn, with the labels the DOT gave it.
        for label in ("h = MulBackward0", "SumBackward0", "_saved_self"):
            assert label in svg


@needs_dot
def test_trace_dot_svg_from_the_cli(cli, tmp_path):
    out = tmp_path / "graph.svg"
    result = cli("trace", "h = x*x + x; h.sum()", "--var", "x=[1.0, 2.0]", "--dot", str(out))
    assert result.exit_code == 0, result.stderr
    assert f"Graph drawn to {out} by Graphviz" in result.stdout
    assert "AddBackward0" in out.read_text() and "h = AddBackward0" in out.read_text()


def test_dot_suffix_and_dash_still_write_text(cli, tmp_path):
    out = tmp_path / "graph.dot"
    assert cli("trace", "x.sum()", "--var", "x=[1.0]", "--dot", str(out)).exit_code == 0
    assert out.read_text().startswith("digraph autograd {")
    printed = cli("trace", "x.sum()", "--var", "x=[1.0]", "--dot", "-")
    assert printed.exit_code == 0 and printed.stdout.startswith("digraph autograd {")


def test_missing_graphviz_is_a_usage_error_with_a_hint(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(graphviz.shutil, "which", lambda name: None)
    out = tmp_path / "graph.png"
    result = cli("trace", "x.sum()", "--var", "x=[1.0]", "--dot", str(out))
    assert result.exit_code == 2
    assert "Graphviz's `dot` program is not installed" in result.stderr
    assert "apt-get install graphviz" in result.stderr and "--dot graph.dot" in result.stderr
    assert result.stdout == "" and not out.exists()  # refused before any work


def test_suffixes():
    assert graphviz.is_picture("a.SVG") and graphviz.is_picture("a.pdf") and not graphviz.is_picture("a.dot")
    assert graphviz.picture_format("g.png") == "png"
    with pytest.raises(UsageError, match="from its suffix"):
        graphviz.picture_format("g.jpeg")


def test_count_nodes_counts_node_statements_not_edges():
    text = 'digraph g {\n  graph [rankdir=TB];\n  n0 [label="a"];\n  n1 [label="b"];\n  n1 -> n0;\n}\n'
    # `graph [...]` is an attribute statement, counted like a node: an over-count of one is harmless.
    assert graphviz.count_nodes(text) == 3


def test_big_graphs_are_refused_before_dot_runs(monkeypatch, tmp_path):
    monkeypatch.setattr(graphviz, "MAX_RENDER_NODES", 5)
    text = trace_dot(trace("h = x; h = h*h + h; h = h*h + h; h.sum()", ["x=0.5"]))
    with pytest.raises(LimitError, match="DOT nodes") as caught:
        graphviz.render(text, tmp_path / "big.svg")
    assert "--dot" in caught.value.hint and not (tmp_path / "big.svg").exists()


@needs_dot
def test_dot_errors_are_reported(tmp_path):
    with pytest.raises(UsageError, match="could not write"):
        graphviz.render("digraph { this is not dot", tmp_path / "bad.svg")
