"""check-function discovery: every Function a package defines, every one a model applied.

The fixtures (tests/fixtures/discover_pkg, discover_module.py, discover_model.py) hold right,
wrong and unrunnable Functions, re-imports, an abstract base and a module that cannot be
imported; each test states what must be found, with which verdict, and the exit status.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch
from torch import nn

from gradcli import check_function
from gradcli.errors import UsageError, UserCodeError
from gradcli.verify.discovery.applied import applied_functions
from gradcli.verify.discovery.check import check_discovered
from paths import FIXTURES, ROOT

PKG = "tests/fixtures/discover_pkg"
MODEL = "tests/fixtures/discover_model.py"


@pytest.fixture(autouse=True)
def from_the_checkout(monkeypatch):
    """Targets are written as a user at the top of the checkout writes them."""
    monkeypatch.chdir(ROOT)


def statuses(result) -> dict[str, str]:
    return {entry.name: entry.status for entry in result.entries}


def test_a_package_walk_finds_every_function_once_where_it_is_defined():
    result = check_discovered(PKG)
    assert result.kind == "package" and result.found == "package discover_pkg, 8 modules"
    assert statuses(result) == {
        f"{PKG}/bases.py:Double": "ok",
        f"{PKG}/needs.py:ApplyThenDouble": "could not run",
        f"{PKG}/nested/deep.py:Softplus": "ok",  # one package down
        f"{PKG}/right.py:Cube": "ok",  # re-imported by __init__.py and wrong.py, checked once
        f"{PKG}/right.py:Affine": "ok",
        f"{PKG}/wrong.py:SinFlipped": "wrong",
    }  # and torch's CheckpointFunction, imported by wrong.py, not at all
    assert [(s.name, s.reason) for s in result.skipped] == [
        (f"{PKG}/bases.py:Elementwise", "no forward of its own: an abstract base")]
    # A missing optional dependency is a note, not a failure (issue 24): see test_missing_dependency.py
    assert not result.unimportable
    assert [(m.name, m.reason) for m in result.missing] == [
        (f"{PKG}/optional_dependency.py", "gradcli_fixture_dependency_that_is_not_installed")]
    assert not result.ok
    assert result.verdict() == "PROBLEM: 1 wrong, 1 could not run (of 6 Functions; 4 ok)"


def test_each_verdict_is_the_one_checking_the_function_alone_gives():
    result = check_discovered(PKG)
    entry = next(e for e in result.entries if e.name.endswith(":SinFlipped"))
    alone = check_function(sys.modules["discover_pkg.wrong"].SinFlipped)
    assert entry.reason == alone.verdict().removeprefix("PROBLEM: ")
    assert entry.reason == "the sign is flipped: backward returns minus the true gradient for x"
    assert torch.equal(entry.result.first[0].got, alone.first[0].got)
    ok = next(e for e in result.entries if e.name.endswith(":Affine"))
    assert ok.reason == "agrees with gradcheck" and ok.result.inputs.names == ["x", "b", "a"]


def test_a_function_whose_inputs_cannot_be_inferred_is_reported_with_why_not_raised():
    entry = next(e for e in check_discovered(PKG).entries if e.name.endswith(":ApplyThenDouble"))
    assert entry.result is None
    assert "ApplyThenDouble.forward raised TypeError: 'Tensor' object is not callable" in entry.reason


def test_a_package_by_module_name_is_named_by_module(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    result = check_discovered("discover_pkg.nested")
    assert result.kind == "package"
    assert statuses(result) == {"discover_pkg.nested.deep:Softplus": "ok"}
    assert result.ok and result.verdict() == "OK: the 1 Function agrees"


def test_a_module_file_checks_its_own_functions_not_imported_ones():
    result = check_discovered("tests/fixtures/discover_module.py")
    assert result.kind == "module"
    assert statuses(result) == {
        "tests/fixtures/discover_module.py:Exp": "ok",
        "tests/fixtures/discover_module.py:SquareTwiceTooBig": "wrong",  # Cube comes from discover_model.py
    }  # and the alias Exponential is Exp, checked once
    assert result.found == "module discover_module" and len(result.entries) == 2
    assert "2 times the true one" in result.entries[1].reason


def test_skip_leaves_functions_out_and_lists_them():
    result = check_discovered(PKG, skip=["ApplyThenDouble", "*/wrong.py:*"])
    assert f"{PKG}/wrong.py:SinFlipped" not in statuses(result)
    assert {(s.name, s.reason) for s in result.skipped} >= {
        (f"{PKG}/needs.py:ApplyThenDouble", "--skip"), (f"{PKG}/wrong.py:SinFlipped", "--skip")}
    assert set(statuses(result).values()) == {"ok"}
    assert result.ok and result.missing  # a missing optional dependency is a note (issue 24)


@pytest.mark.parametrize("target, error, text", [
    ("tests/fixtures/models/mlp.py", UsageError, "defines no torch.autograd.Function to check"),
    ("no_such_package_for_gradcli", UsageError, "no module named 'no_such_package_for_gradcli'"),
    ("tests/fixtures/no such folder", UsageError, "is no module, file or folder"),
    (f"{MODEL}:NoFunctions", UsageError, "applied no custom torch.autograd.Function to check"),
    ("tests/fixtures/broken_import.py", UserCodeError, 'broken_import.py", line 5, in <module>'),
])
def test_nothing_to_check_or_a_bad_target_is_an_error(target, error, text):
    with pytest.raises(error) as info:
        check_discovered(target, ["x=randn(2,4)"] if ":" in target else ())
    assert text in info.value.render()


def test_options_that_name_one_function_are_refused_for_many():
    with pytest.raises(UsageError, match="names many Functions: --var name one Function's inputs"):
        check_discovered(PKG, ["x=[1.0]"])
    with pytest.raises(UsageError, match="names many Functions: --ref, --output, --expect-grad name one"):
        check_discovered(PKG, ref="x", output=0, expect_grad=["-grad_output"])
    for given in ({"ref": "x**3"}, {"output": 1}, {"expect_grad": ["-grad_output"]}):
        with pytest.raises(UsageError, match="is a model: --(ref|output|expect-grad) name one Function's"):
            check_discovered(f"{MODEL}:TwoFunctions", ["x=randn(2,4)"], **given)
    with pytest.raises(UsageError, match="--init and --skip apply to a model or a package"):
        check_discovered(f"{MODEL}:Cube", init=["width=3"])
    assert check_discovered(f"{MODEL}:Cube") is None  # one Function: check_function checks it alone


def test_a_model_checks_each_custom_function_its_forward_applied_at_the_inputs_received():
    result = check_discovered(f"{MODEL}:TwoFunctions", ["x=randn(2,4)"], seed=0)
    assert result.kind == "model"
    assert result.found == "nn.Module subclass TwoFunctions, constructed as TwoFunctions()"
    assert [(e.name, e.status, e.calls) for e in result.entries] == [
        (f"{MODEL}:Cube", "ok", 2),
        (f"{MODEL}:LeakyForgetsSlope", "wrong", 1),
        (f"{MODEL}:Gather", "ok", 1),
    ]
    assert [(s.name, s.reason) for s in result.skipped] == [
        ("torch.utils.checkpoint:CheckpointFunction", "torch's own Function, applied once")]
    # The inputs are what forward passed: the same model and x, rebuilt here by hand.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        from discover_model import TwoFunctions

        model = TwoFunctions()
    x = torch.randn((2, 4), generator=torch.Generator().manual_seed(0), dtype=torch.float64).float()
    cube, leaky, gather = (e.result for e in result.entries)
    assert cube.inputs.values[0].dtype == torch.float64 and cube.inputs.values[0].requires_grad
    torch.testing.assert_close(cube.inputs.values[0], model.fc(x).detach().double(), rtol=0, atol=1e-7)
    torch.testing.assert_close(leaky.inputs.values[0], (model.fc(x) ** 3).detach().double(), rtol=0, atol=1e-7)
    assert leaky.inputs.values[1] == 0.1  # a number stays a number
    assert gather.inputs.values[1].tolist() == [0, 0, 1] and gather.inputs.values[1].dtype == torch.int64
    assert [c.summary for c in leaky.causes] == ["wrong only where x < 0 (right where x > 0): check the branch of backward for x < 0"]
    assert result.verdict() == "PROBLEM: 1 wrong (of 3 Functions; 2 ok)"


def test_a_plain_function_target_is_a_model_too():
    result = check_discovered(f"{MODEL}:cube_twice", ["x=[0.5, -1.5]"])
    assert [(e.name, e.status, e.calls) for e in result.entries] == [(f"{MODEL}:Cube", "ok", 2)]
    # The first call received x itself (a function's inputs are float64, as trace makes them).
    assert result.entries[0].result.inputs.values[0].tolist() == [0.5, -1.5]


class InPlaceDouble(torch.autograd.Function):
    """x.mul_(2) in place (mark_dirty)."""

    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


class InPlaceNet(nn.Module):
    def forward(self, x):
        h = x + 1
        return InPlaceDouble.apply(h).sum()


class RaisingNet(nn.Module):
    def forward(self, x):
        InPlaceDouble.apply(x + 1)
        raise ValueError("forward is not written yet")


def test_arguments_are_recorded_before_the_call_changes_them():
    applied = applied_functions(InPlaceNet(), "InPlaceNet", ["x=[1.0, 2.0]"], init=(), seed=0)
    (application,) = applied.applications
    assert application.cls is InPlaceDouble
    assert application.args[0].tolist() == [2.0, 3.0]  # x + 1, not the doubled [4, 6]


def test_apply_is_put_back_even_when_forward_raises():
    original = torch.autograd.Function.__dict__["apply"]
    with pytest.raises(UserCodeError) as info:
        applied_functions(RaisingNet(), "RaisingNet", ["x=[1.0]"], init=(), seed=0)
    assert 'raise ValueError("forward is not written yet")' in info.value.render()
    assert "gradcli/" not in info.value.render()  # the user's frames only
    assert torch.autograd.Function.__dict__["apply"] is original


# The command line: one line each, exit 1 if any is wrong or could not run, 2 for nothing found.

def test_cli_package_one_line_each(cli):
    result = cli("check-function", PKG)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"check-function {PKG}   (package discover_pkg, 8 modules; order 1, seed 0)"
    assert f"  WRONG          {PKG}/wrong.py:SinFlipped       the sign is flipped: backward returns minus the true gradient for x" in lines
    assert f"  ok             {PKG}/right.py:Cube             agrees with gradcheck" in lines
    assert any(line.startswith(f"  COULD NOT RUN  {PKG}/needs.py:ApplyThenDouble  ApplyThenDouble.forward raised TypeError")
               for line in lines)
    assert (f"note: {PKG}/optional_dependency.py not checked: it needs "
            "'gradcli_fixture_dependency_that_is_not_installed', which is not installed here (an optional dependency; "
            "install it to check the Functions it defines)") in lines
    assert f"  skipped {PKG}/bases.py:Elementwise: no forward of its own: an abstract base" in lines
    assert lines[-1] == "PROBLEM: 1 wrong, 1 could not run (of 6 Functions; 4 ok)"
    assert result.stderr == ""


def test_cli_all_right_exits_0_and_order_2_runs_double_backward(cli):
    result = cli("check-function", f"{PKG}/right.py", "--order", "2")
    assert result.exit_code == 0, result.stdout
    assert f"  ok  {PKG}/right.py:Cube    agrees with gradcheck, gradgradcheck" in result.stdout.splitlines()
    assert result.stdout.splitlines()[-1] == "OK: all 2 Functions agree"


def test_cli_model(cli):
    result = cli("check-function", f"{MODEL}:TwoFunctions", "--var", "x=randn(2,4)", "--init", "width=3", "--skip", "Gather")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[2:4] == [
        f"  ok     {MODEL}:Cube               agrees with gradcheck (applied 2 times)",
        f"  WRONG  {MODEL}:LeakyForgetsSlope  wrong only where x < 0 (right where x > 0): check the branch of backward for x < 0",
    ]
    assert f"  skipped {MODEL}:Gather: --skip" in result.stdout.splitlines()


@pytest.mark.parametrize("args", [
    ["tests/fixtures/models/mlp.py"], [f"{MODEL}:NoFunctions", "--var", "x=randn(2,4)"], ["tests/fixtures/broken_import.py"],
    [PKG, "--var", "x=[1.0]"], [f"{MODEL}:TwoFunctions"],  # the model's input x is missing
])
def test_cli_nothing_found_or_bad_input_exits_2(cli, args):
    result = cli("check-function", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr and result.stdout == ""


def test_cli_json_is_one_document_with_every_functions_result(cli):
    result = cli("check-function", PKG, "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert (doc["kind"], doc["ok"], doc["counts"]) == ("package", False, {"ok": 4, "wrong": 1, "not_tested": 0,
                                                                     "could_not_run": 1})
    by_name = {f["name"].rsplit(":", 1)[1]: f for f in doc["functions"]}
    assert by_name["SinFlipped"]["result"]["gradcheck"]["ok"] is False
    assert [c["summary"] for c in by_name["SinFlipped"]["result"]["causes"]] == [
        "the sign is flipped: backward returns minus the true gradient for x"]
    assert by_name["ApplyThenDouble"]["result"] is None and by_name["ApplyThenDouble"]["status"] == "could not run"
    assert doc["unimportable"] == []
    assert doc["missing_dependencies"] == [{"module": f"{PKG}/optional_dependency.py",
                                            "dependency": "gradcli_fixture_dependency_that_is_not_installed"}]
    assert doc["skipped"] == [{"name": f"{PKG}/bases.py:Elementwise", "reason": "no forward of its own: an abstract base"}]


def test_the_readme_excerpt_is_the_real_output(cli):
    readme = (ROOT / "docs" / "commands" / "check-function.md").read_text(encoding="utf-8")
    start = readme.index("```text\ncheck-function examples/custom_ops ")
    excerpt = readme[start + len("```text\n"):readme.index("```", start + 3)]
    result = cli("check-function", "examples/custom_ops")
    assert result.exit_code == 1
    assert result.stdout == excerpt


def test_a_submodule_that_exits_on_import_is_reported_and_the_walk_goes_on(tmp_path):
    package = tmp_path / "gradcli_exiting_pkg"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("import sys\nsys.exit(3)\n")
    (package / "ops.py").write_text((FIXTURES / "discover_pkg" / "right.py").read_text())
    result = check_discovered(str(package))
    assert statuses(result) == {f"{package}/ops.py:Cube": "ok", f"{package}/ops.py:Affine": "ok"}
    (module,) = result.unimportable
    assert module.name == f"{package}/inner/__init__.py"
    assert module.reason.startswith("importing gradcli_exiting_pkg.inner raised SystemExit: 3")
    assert not result.ok


CONSTANT = """
import torch


class Constant(torch.autograd.Function):
    \"\"\"A flat output: its Jacobian is 0 everywhere, so comparing it tests no backward.\"\"\"

    @staticmethod
    def forward(ctx, x):
        return torch.ones_like(x)

    @staticmethod
    def backward(ctx, grad):
        return torch.zeros_like(grad)


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x ** 2
"""


def test_a_function_whose_comparison_tested_nothing_is_not_tested_not_wrong_and_fails_ci(cli, tmp_path):
    module = tmp_path / "flat_ops.py"
    module.write_text(CONSTANT)
    result = check_discovered(str(module))
    assert statuses(result) == {f"{module}:Constant": "not tested", f"{module}:Cube": "ok"}
    assert not result.ok and result.verdict().startswith("PROBLEM: 1 not tested (of 2 Functions; 1 ok)")
    shown = cli("check-function", str(module))
    assert shown.exit_code == 1
    assert any(line.split()[:3] == ["NOT", "TESTED", f"{module}:Constant"] for line in shown.stdout.splitlines())
    assert json.loads(cli("check-function", str(module), "--json").stdout)["counts"]["not_tested"] == 1


def test_a_function_that_failed_on_invented_arguments_says_which_and_how_to_give_them():
    result = check_discovered("tests/fixtures/typed_functions.py")
    (entry,) = [e for e in result.entries if e.name.endswith(":MaskedFill")]
    assert entry.status == "could not run"
    assert entry.reason.startswith("MaskedFill.forward raised RuntimeError: masked_fill_ only supports boolean masks")
    assert entry.reason.endswith("(gradcli invented x, mask: give real values to it alone, with --var or "
                                 "check_function(given=...))")
    # Given as it names itself, with real values, the same Function runs and agrees.
    alone = check_function(entry.name, ["mask=[True, False, True, False, False, False, True, False, False, False, "
                                        "False, False, False, False]"])
    assert alone.ok, str(alone)
