"""The demo runner, the listing, and the mechanics demos (backward, grad, graph).

Numbers are read back from what each demo prints and compared with values computed here
independently (same seed), so a demo that prints the wrong tensor fails.
"""

from __future__ import annotations

import re

import pytest
import torch

from gradcli.demos import NAMES, run_demo
from gradcli.demos.runner import Code, GraphDrawing, Heading, Prose, Session, Shell, Verdict
from gradcli.render.demo import output_lines

NUMBER = re.compile(r"-?\d+\.\d*(?:e[-+]?\d+)?")


def printed(run, source: str) -> str:
    """The output printed under the one code block whose source ends with `source`."""
    matches = [b.output for b in run.blocks if isinstance(b, Code) and b.source.endswith(source)]
    assert len(matches) == 1, f"expected one block with source {source!r}"
    return matches[0]


def numbers(text: str) -> torch.Tensor:
    return torch.tensor([float(v) for v in NUMBER.findall(text)], dtype=torch.float64)


def seeded_t1() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(3, 3).double().flatten()


# --- the runner -------------------------------------------------------------------------


def test_session_shows_last_expression_prints_and_shares_namespace():
    blocks = []
    session = Session(blocks.append)
    assert session.run("a = 2\nprint('hello')\na * 21") == 42
    assert session.run("b = a + 1") is None
    assert blocks == [Code("a = 2\nprint('hello')\na * 21", "hello\n42"), Code("b = a + 1", "")]
    assert session.namespace["b"] == 3


def test_session_shows_expected_errors_and_propagates_others():
    blocks = []
    session = Session(blocks.append)
    err = session.run("1 / 0", raises=ZeroDivisionError)
    assert isinstance(err, ZeroDivisionError)
    assert blocks[-1].output == "ZeroDivisionError: division by zero"
    with pytest.raises(NameError):
        session.run("undefined_name")


def test_session_shows_where_an_error_in_library_code_was_raised():
    blocks = []
    session = Session(blocks.append)
    session.run("import json\njson.loads('{')", raises=ValueError)
    out = blocks[-1].output
    assert out.startswith("JSONDecodeError: Expecting property name")
    assert "raised in raw_decode, decoder.py line" in out


def test_session_records_warnings_and_verdicts():
    blocks = []
    session = Session(blocks.append)
    session.run("import warnings\nwarnings.warn('careful')")
    assert blocks[-1].output == "UserWarning: careful"
    session.step("A title")
    session.say("""Two
        lines.""")
    assert session.verdict(False, "failed") is False
    assert blocks[-3:] == [Heading("1. A title"), Prose("Two lines."), Verdict(False, "failed")]
    assert not session.ok


def test_show_prints_the_source_of_the_object_that_runs():
    from gradcli.demos.swish_function import Swish

    blocks = []
    Session(blocks.append).show(Swish)
    source = blocks[0].source
    assert source.startswith("class Swish(torch.autograd.Function):")
    assert "ctx.save_for_backward(input)" in source
    assert "return grad_output * (beta * f + sigma * (1 - beta * f)), None" in source


def test_output_lines_prefix_and_wrap():
    lines = output_lines("short\n" + "word " * 40, 60)
    assert lines[0] == "    #> short"
    assert all(len(line) <= 60 and line.startswith("    #> ") for line in lines)
    assert " ".join(line[len("    #> "):] for line in lines[1:]).split() == ["word"] * 40
    assert lines[2].startswith("    #>     word")  # continuation lines hang
    indented = output_lines("  first " + "x " * 40, 40)
    assert indented[0].startswith("    #>   first") and indented[1].startswith("    #>       x")


# --- the CLI ----------------------------------------------------------------------------


def test_demo_without_name_lists_every_demo_one_line_each(cli):
    result = cli("demo")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    for name in NAMES:
        assert sum(line.split()[:1] == [name] for line in lines) == 1


def test_unknown_demo_is_exit_2_with_the_list(cli):
    result = cli("demo", "nosuch")
    assert result.exit_code == 2
    assert "there is no demo named 'nosuch'" in result.stderr
    for name in NAMES:
        assert f"  {name} " in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [["graph", "--buggy"], ["backward", "--beta", "2"], ["swish", "--beta", "nan"], ["swish", "--beta", "100"]])
def test_options_that_do_not_fit_are_exit_2(cli, args):
    result = cli("demo", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr


# --- demo backward ----------------------------------------------------------------------


def test_backward_demo_numbers():
    run = run_demo("backward")
    t1 = seeded_t1()
    assert run.ok and len(run.verdicts) == 6
    torch.testing.assert_close(numbers(printed(run, "t2.backward()\nt1.grad")), 2 * t1, atol=5e-5, rtol=0)
    accumulated = printed(run, "t1.grad = None\nt2 = t1.pow(2).sum()\nt2.backward(retain_graph=True)\n"
                          "t2.backward()  # a second pass through the retained graph\nt1.grad")
    torch.testing.assert_close(numbers(accumulated), 4 * t1, atol=5e-5, rtol=0)
    torch.testing.assert_close(numbers(printed(run, "t1.grad.zero_()")), torch.zeros(9, dtype=torch.float64))
    assert printed(run, "t2.backward()").startswith("RuntimeError: Trying to backward through the graph a second time")
    assert printed(run, "y = t1.pow(2)\ny.backward()") == "RuntimeError: grad can be implicitly created only for scalar outputs"
    torch.testing.assert_close(numbers(printed(run, "y.backward(gradient=torch.ones_like(y))\nt1.grad")), 2 * t1, atol=5e-5, rtol=0)


def test_backward_demo_cli(cli):
    result = cli("demo", "backward")
    assert result.exit_code == 0, result.stdout
    assert "    t2.backward(retain_graph=True)\n" in result.stdout
    t1 = seeded_t1()
    first_row = "    #> tensor([[" + ", ".join(f"{v:7.4f}" for v in (2 * t1[:3]).tolist()) + "],"
    assert first_row in result.stdout
    assert "    #> after pass 1: t1.grad / t1 = [2.0]\n    #> after pass 2: t1.grad / t1 = [4.0]\n    #> after pass 3: t1.grad / t1 = [6.0]\n" in result.stdout
    assert "    $ gradcli trace 't1.pow(2).sum()' --var 't1=randn(3,3)' --repeat 3 --retain-graph\n" in result.stdout
    assert result.stdout.rstrip().endswith("All 6 checks agreed.")


# --- demo grad --------------------------------------------------------------------------


def test_grad_demo_numbers():
    run = run_demo("grad")
    t1 = seeded_t1()
    assert run.ok and len(run.verdicts) == 5
    source = "import torch\n\ntorch.manual_seed(0)\nt1 = torch.randn(3, 3, requires_grad=True)\nt2 = t1.pow(2).sum()\n(g,) = torch.autograd.grad(t2, t1)\ng"
    torch.testing.assert_close(numbers(printed(run, source)), 2 * t1, atol=5e-5, rtol=0)
    assert printed(run, "print(t1.grad)") == "None"
    assert run.namespace["t1"].grad is None
    assert printed(run, "torch.autograd.grad(t2, t1)").startswith("RuntimeError: Trying to backward through the graph a second time")
    torch.testing.assert_close(numbers(printed(run, "(g2,) = torch.autograd.grad(g.sum(), t1)\ng2")), 6 * t1, atol=5e-5, rtol=0)
    assert "element 0 of tensors does not require grad" in printed(run, "t3 = t1.pow(3).sum()\n(g,) = torch.autograd.grad(t3, t1)\ntorch.autograd.grad(g.sum(), t1)")


def test_grad_demo_cli(cli):
    result = cli("demo", "grad")
    assert result.exit_code == 0
    assert "    #> None\n" in result.stdout
    assert "    #> 'MulBackward0'\n" in result.stdout
    checks = "{'both passes return 3·t1²': True, 't1.grad stays None': True, 'the second derivative is 6·t1': True}"
    assert "    #> " + checks + "\n" in result.stdout  # 120 columns: on one line


# --- demo graph -------------------------------------------------------------------------


def test_graph_demo_walks_to_accumulate_grad():
    run = run_demo("graph")
    assert run.ok
    assert printed(run, "t2.grad_fn.name(), t1.grad_fn, t1.is_leaf") == "('SumBackward0', None, True)"
    assert printed(run, "pow_node, input_nr = t2.grad_fn.next_functions[0]\npow_node.name(), input_nr") == "('PowBackward0', 0)"
    assert printed(run, "torch.equal(pow_node._saved_self, t1), pow_node._saved_exponent") == "(True, 2)"
    leaf = printed(run, "leaf_node = pow_node.next_functions[0][0]\nleaf_node.name(), leaf_node.variable is t1, leaf_node.next_functions")
    assert leaf == "('torch::autograd::AccumulateGrad', True, ())"


def test_graph_demo_tree_repeats_shared_nodes(cli):
    result = cli("demo", "graph")
    assert result.exit_code == 0
    tree = [line for line in result.stdout.splitlines() if line.startswith("    #> ") and line.strip("#> ").endswith(("Backward0", "AccumulateGrad"))]
    assert sum("AccumulateGrad" in line for line in tree) == 9  # x is used nine times
    assert sum(line.strip("#> ") == "AddBackward0" for line in tree) == 4  # y's node, then h's three times


def test_terminal_rendering_highlights_code_without_trailing_blanks():
    from io import StringIO

    from rich.console import Console

    from gradcli.cli.output import show, write
    from gradcli.render.demo import spacing

    out = StringIO()
    console = Console(file=out, force_terminal=True, color_system="standard", width=60)
    previous = None
    for block in (Heading("1. Title"), Code("import torch\n\nx = 1", "#> not really"), Verdict(True, "fine")):
        write(spacing(previous, block), console)
        show(block, "text", console)
        previous = block
    text = out.getvalue()
    assert "\x1b[" in text  # coloured
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()
    assert plain[1:6] == ["    import torch", "", "    x = 1", "    #> #> not really", "    ✓ fine"]
    assert all(line == line.rstrip() for line in plain)


def test_graph_demo_draws_the_walked_graph_once_per_node(cli):
    run = run_demo("graph")
    [drawing] = [b for b in run.blocks if isinstance(b, GraphDrawing)]
    assert [node.name for node in drawing.graph.nodes] == [
        "AddBackward0", "MulBackward0", "AddBackward0", "MulBackward0", "torch::autograd::AccumulateGrad",
    ]
    out = cli("demo", "graph").stdout
    assert "    └── n0 AddBackward0\n" in out
    assert out.count("↑ n2 AddBackward0, shown above") == 2
    assert out.count("↑ n4 AccumulateGrad (x), shown above") == 2


@pytest.mark.parametrize("name", ["graph", "backward", "grad", "swish"])
def test_every_suggested_command_runs(cli, name):
    commands = [b for b in run_demo(name, **({"buggy": True} if name == "swish" else {})).blocks if isinstance(b, Shell)]
    assert commands
    for command in commands:
        result = cli(*command.args)
        expected = 1 if "SwishSavedSigma" in command.text else 0
        assert result.exit_code == expected, (command.text, result.stdout, result.stderr)


@pytest.mark.parametrize("name", ["backward", "grad", "chain-rule"])
def test_demo_code_uses_the_public_api(name):
    # The demos printed `from gradcli.tracing.trace import trace`, an internal path a reader
    # would copy; the README's API is `gradcli.trace`, whose result also renders itself.
    sources = [b.source for b in run_demo(name).blocks if isinstance(b, Code)]
    assert any("gradcli.trace(" in source for source in sources)
    assert not any("gradcli.graph" in source for source in sources)
