"""What every command shares: help with examples, lazy imports, EXPR from @FILE and stdin,
and bad input (hostile or huge) ending in exit 2 with one paragraph and no traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gradcli.cli import app
from gradcli.cli.app import read_expression
from gradcli.errors import UsageError

PYTHON = sys.executable


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120)


def test_python_dash_m_gradcli_help():
    result = subprocess.run([PYTHON, "-m", "gradcli", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert "Inspect and check PyTorch autograd from the shell." in result.stdout
    assert "Examples:" in result.stdout
    assert result.stderr == ""


def test_version_is_the_installed_distribution_s():
    # The version is written once (gradcli.__version__, which pyproject reads); what pip
    # recorded when it installed gradcli is the outside truth.
    from importlib.metadata import version

    result = subprocess.run([PYTHON, "-m", "gradcli", "--version"], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"gradcli {version('gradcli')}\n", "")


def _commands() -> list[str]:
    return sorted(c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands)


def test_help_does_not_import_torch_or_sympy():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from gradcli.cli import app\n"
        "names = [c.name or c.callback.__name__.replace('_', '-') for c in app.registered_commands]\n"
        "runner = CliRunner()\n"
        "codes = [runner.invoke(app, ['--help']).exit_code]\n"
        "codes += [runner.invoke(app, [name, '--help']).exit_code for name in names]\n"
        "print(codes, 'torch' in sys.modules, 'sympy' in sys.modules)\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    codes, torch_loaded, sympy_loaded = result.stdout.rsplit(" ", 2)
    assert set(json.loads(codes)) == {0}
    assert (torch_loaded, sympy_loaded.strip()) == ("False", "False")


@pytest.mark.parametrize("command", _commands())
def test_every_command_help_has_an_example(cli, command):
    result = cli(command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout
    assert "gradcli " in result.stdout.split("Example", 1)[1]


def test_read_expression_from_a_file_stdin_and_as_given(tmp_path, monkeypatch):
    path = tmp_path / "program.txt"
    path.write_text("h = x * x\nh.sum()\n", encoding="utf-8")
    assert read_expression(f"@{path}") == "h = x * x\nh.sum()\n"
    assert read_expression("x + 1") == "x + 1"
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("exp(x)"))
    assert read_expression("-") == "exp(x)"
    with pytest.raises(UsageError) as info:
        read_expression(f"@{tmp_path / 'missing.txt'}")
    assert "cannot read the expression file" in info.value.message
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe x")
    with pytest.raises(UsageError):
        read_expression(f"@{tmp_path / 'bad.txt'}")


# -- bad input through the CLI ---------------------------------------------------------------
def assert_refused(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr
    assert result.stdout == ""


HOSTILE_CLI = [
    ("__import__('os').system('touch {marker}')", "unknown"),
    ("x.__class__", "attribute access is not part of the language"),
    ("().__class__.__bases__", "attribute access is not part of the language"),
    ("open('{marker}', 'w')", "unknown function 'open'"),
    ("lambda: open('{marker}', 'w')", "lambdas are not part of the language"),
    ("[open('{marker}', 'w') for i in x]", "comprehensions are not part of the language"),
    ("x[::-1]", "a slice step must be positive"),  # subscripts are in the language; a negative step is not
    ("'{marker}'", "strings are not part of the language"),
    ("f'{{open(\"{marker}\")}}'", "strings are not part of the language"),
    ("(y := x)", "':=' is not part of the language"),
    ("__x * 2", "the name '__x' is not allowed"),
    ("x ^ 2", "use ** for powers"),
    ("sigmod(x)", "did you mean 'sigmoid'?"),
    ("x.sum(dimm=0)", "did you mean 'dim'?"),
    ("exp(x, x)", "exp() takes at most 1 argument (2 given)"),
    ("3j * x", "complex numbers are not part of the language"),
    ("x * " + "9" * 400, "the number is larger than 1e+300"),
    ("9**9**9**9", "is larger than 1e+300"),
    ("x * 9**9**9**9", "is larger than 1e+300"),
    ("(" * 3000 + "x" + ")" * 3000, "nests parentheses more than 200 levels deep"),
]


@pytest.mark.parametrize(("template", "message"), HOSTILE_CLI, ids=[t[:30] for t, _ in HOSTILE_CLI])
@pytest.mark.parametrize("command", ["trace", "check"])
def test_hostile_expressions_exit_2_and_nothing_runs(cli, tmp_path, template, message, command):
    if command not in _commands():
        pytest.skip(f"no {command} command yet")
    marker = tmp_path / "marker"
    result = cli(command, template.format(marker=marker))
    assert_refused(result, message)
    assert not marker.exists()


def test_null_bytes_exit_2(cli, tmp_path):
    path = tmp_path / "nul.txt"
    path.write_text("x\x00 + 1", encoding="utf-8")
    assert_refused(cli("trace", f"@{path}"), "the expression contains a null byte")


def test_caret_under_the_column_through_the_cli(cli):
    result = cli("trace", "é + ñ + sigmod(x)")
    assert_refused(result, "unknown function 'sigmod'", "did you mean 'sigmoid'?")
    assert "    é + ñ + sigmod(x)\n            ^~~~~~" in result.stderr


@pytest.mark.parametrize(
    ("var", "message"),
    [
        ("x=randn(100000,100000)", "10,000,000,000 elements"),
        ("x=[[1,2],[3]]", "the list is ragged"),
        ("x=rnadn(3)", "did you mean 'randn'?"),
        ("x=__import__('os')", "unknown constructor '__import__'"),
    ],
)
def test_bad_var_exit_2(cli, var, message):
    assert_refused(cli("trace", "x.sum()", "--var", var), message)


def test_bad_dtype_and_device_exit_2(cli):
    assert_refused(cli("trace", "x*x", "--dtype", "int64"), "unknown --dtype 'int64'")
    assert_refused(cli("trace", "x*x", "--device", "meta"), "needs a device that holds values")


def test_a_20000_term_sum_works_through_the_cli(cli):
    result = cli("trace", "+".join(["x"] * 20_000), "--var", "x=0.5", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["result"]["value"] == 10_000.0
    assert data["leaves"][0]["grad"] == 20_000.0


def test_a_20000_statement_program_from_a_file_works_through_the_cli(cli, tmp_path):
    path = tmp_path / "long.gc"
    path.write_text("h = x\n" + "h = h * 0.5 + x\n" * 20_000 + "h.sum()\n", encoding="utf-8")
    result = cli("trace", f"@{path}", "--var", "x=[1, -2]", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["result"]["value"] == pytest.approx(-2.0, rel=1e-12)
    assert data["leaves"][0]["grad"] == pytest.approx([2.0, 2.0], rel=1e-12)


def test_an_expression_from_stdin(cli):
    result = cli("trace", "-", "--var", "x=[1, 2]", "--json", input="h = x * x\nh.sum()\n")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["result"]["value"] == 5.0
    assert data["leaves"][0]["grad"] == [2.0, 4.0]


def test_swish_with_beta_works_inside_an_expression(cli):
    result = cli("trace", "swish(x, beta=1.5).sum()", "--var", "x=[0, 1]", "--json")
    assert result.exit_code == 0, result.stderr
    import math

    expected = 0 + 1 / (1 + math.exp(-1.5))
    assert json.loads(result.stdout)["result"]["value"] == pytest.approx(expected, rel=1e-12)


def test_library_option_adds_a_folder(cli, tmp_path):
    (tmp_path / "mine.toml").write_text(
        '[triple]\nsignature = "triple(x)"\nbody = "3 * x"\ndoc = "3x"\nsource = "tests"\n', encoding="utf-8"
    )
    result = cli("trace", "triple(x)", "--var", "x=2", "--library", str(tmp_path), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["result"]["value"] == 6.0
    (tmp_path / "bad.toml").write_text("[oops\n", encoding="utf-8")
    assert_refused(cli("trace", "x", "--library", str(tmp_path)), "not valid TOML")


def test_console_script_exits_with_the_command_status_and_flushed_output(tmp_path):
    """main() leaves with os._exit (no interpreter teardown): the output must still arrive
    whole and the status must be the command's."""
    import subprocess
    import sys

    ok = subprocess.run([sys.executable, "-m", "gradcli", "list", "--json"], capture_output=True, text=True)
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["functions"]
    bad = subprocess.run([sys.executable, "-m", "gradcli", "trace", "sigmod(x)"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: unknown function 'sigmod'")
    usage = subprocess.run([sys.executable, "-m", "gradcli", "nosuchcommand"], capture_output=True, text=True)
    assert usage.returncode == 2


def test_the_model_options_are_declared_once_in_the_cli():
    # One block (cli/app.py) for how a command names, makes and feeds a model: a command takes
    # the option from there, so help and completion cannot drift between grads, memory, compare.
    from pathlib import Path

    import gradcli.cli

    sources = "".join(p.read_text(encoding="utf-8") for p in Path(gradcli.cli.__file__).parent.glob("*.py"))
    counts = {name: sources.count(name) for name in ('"--init"', '"--loss"', '"--loss-init"', 'metavar="TARGET"',
                                                      '"--seed"', '"--device"', '"--var"')}
    assert counts == dict.fromkeys(counts, 1)
