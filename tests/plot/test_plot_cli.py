"""`gradcli plot`: pictures of the right type and size, the terminal plot, and refusals."""

from __future__ import annotations

import sys

import pytest

from gradcli.plot.data import plot_data
from gradcli.plot.terminal import plain_text, terminal_plot

pytest.importorskip("matplotlib")

MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF-"}


def assert_picture(path, suffix: str, smallest: int) -> None:
    data = path.read_bytes()
    assert len(data) > smallest, len(data)
    if suffix == ".svg":
        head = data[:400].decode("utf-8")
        assert head.startswith("<?xml") and "<svg" in head
        assert data.rstrip().endswith(b"</svg>")
    else:
        assert data.startswith(MAGIC[suffix])


@pytest.mark.parametrize("suffix, smallest", [(".png", 30_000), (".svg", 50_000), (".pdf", 10_000)])
def test_softplus_picture_each_format(cli, tmp_path, suffix, smallest):
    out = tmp_path / f"softplus{suffix}"
    result = cli("plot", "log(1+exp(x))", "--var", "x=linspace(-800,800,2001)", "-o", str(out))
    # autograd is nan past 709.78 where the derivative is 1: a problem found, exit 1.
    assert result.exit_code == 1, result.stderr
    assert_picture(out, suffix, smallest)
    assert "autograd gives nan for x from 710.4 to 800 where the exact value is 1 (113 points)" in result.stdout
    assert f"picture written to {out}" in result.stdout


def test_second_order_picture_and_agreement(cli, tmp_path):
    out = tmp_path / "swish.png"
    result = cli("plot", "x*sigmoid(x)", "--order", "2", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert_picture(out, ".png", 30_000)
    assert "d/dx: autograd agrees with the exact derivative at 1,001 points" in result.stdout
    assert "d²/dx²: autograd agrees" in result.stdout


def test_same_command_same_svg(cli, tmp_path):
    """No dates in the files: the README pictures only change when the drawing does."""
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    for out in (a, b):
        assert cli("plot", "abs(x)", "--var", "x=linspace(-1,1,21)", "-o", str(out)).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


def test_terminal_plot(cli):
    result = cli("plot", "log(1+exp(x))", "--var", "x=linspace(-800,800,2001)", "--terminal")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "f(x) = log(1+exp(x))"
    assert max(len(line) for line in lines) <= 120
    # The strip under the derivative panel ends in '!' (autograd wrong) over x > 709.78.
    strips = [line for line in lines if line.rstrip().endswith("!")]
    assert strips and strips[0].rstrip().endswith("!!!!!")
    assert "! autograd wrong (d/dx)" in result.stdout and "? f not finite" in result.stdout
    assert "\x1b[" not in result.stdout  # NO_COLOR: plain text


def test_terminal_plot_shape():
    data = plot_data("abs(x)", ["x=linspace(-1, 1, 81)"])
    text = plain_text(terminal_plot(data, width=60))
    rows = text.splitlines()
    assert rows[0] == "f(x) = abs(x)"
    assert all(len(r) <= 60 for r in rows)
    f_panel = rows[1:13]
    # |x| is a V: the lowest drawn row has its point in the middle column, the top row at both ends.
    drawn = [r for r in f_panel if "*" in r[11:]]
    assert drawn[0][12] == "*" and drawn[0].rstrip()[-1] == "*"
    bottom = drawn[-1][12:]
    first, last = bottom.index("*"), bottom.rindex("*")
    assert set(bottom[first:last + 1]) == {"*"}  # one run of points ...
    assert abs((first + last) / 2 - (60 - 12 - 1) / 2) <= 1  # ... centred on x = 0


def test_needs_output_or_terminal(cli):
    result = cli("plot", "x*x")
    assert result.exit_code == 2 and "-o out.png" in result.stderr


def test_bad_suffix_is_refused_before_work(cli, tmp_path):
    result = cli("plot", "x*x", "-o", str(tmp_path / "out.jpeg"))
    assert result.exit_code == 2 and "name the file .png, .svg or .pdf" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_matplotlib_says_how_to_install(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    result = cli("plot", "x*x", "-o", str(tmp_path / "out.png"))
    assert result.exit_code == 2
    assert "matplotlib" in result.stderr and "pip install 'gradcli[plot]'" in result.stderr
    assert not (tmp_path / "out.png").exists()
    # --terminal needs no matplotlib
    assert cli("plot", "x*x", "--terminal").exit_code == 0


def test_unwritable_path(cli, tmp_path):
    result = cli("plot", "x*x", "-o", str(tmp_path / "no" / "such" / "dir.png"))
    assert result.exit_code == 2 and "cannot write the picture" in result.stderr


def test_expression_errors_point_at_the_input(cli):
    result = cli("plot", "x +* 2", "--terminal")
    assert result.exit_code == 2 and "^" in result.stderr and "Traceback" not in result.stderr
