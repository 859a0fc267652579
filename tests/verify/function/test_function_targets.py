"""check-function's targets (issue 16, point 1): a file inside a package is imported as part of
it, so its relative imports work; `package.module:Class` is found from the current folder too;
an ImportError is always a message with the user's frames (exit 2), never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gradcli import check_function
from gradcli.errors import UsageError, UserCodeError
from gradcli.targets.load import package_of
from paths import FIXTURES

PACKAGE = FIXTURES / "fnpkg"


def test_package_of_names_a_file_by_its_dotted_path():
    assert package_of(PACKAGE / "ops.py") == ("fnpkg.ops", PACKAGE.resolve())
    assert package_of(PACKAGE / "kernels" / "scale.py") == ("fnpkg.kernels.scale", PACKAGE.resolve())
    assert package_of(PACKAGE / "__init__.py") == ("fnpkg", PACKAGE.resolve())
    assert package_of(FIXTURES / "functions.py") is None  # tests/fixtures has no __init__.py


@pytest.mark.parametrize("target, ok", [
    (f"{PACKAGE / 'ops.py'}:Swish", True),
    (f"{PACKAGE / 'ops.py'}:SwishNoProduct", False),
    (f"{PACKAGE / 'kernels' / 'scale.py'}:SigmoidScale", True),  # `from ..util import` two levels down
])
def test_a_file_with_relative_imports_is_checked_and_verdicted(target, ok):
    result = check_function(target)
    assert result.ok is ok, str(result)
    assert result.gradcheck.ok is ok


def test_the_file_is_the_package_module_not_a_second_copy():
    check_function(f"{PACKAGE / 'ops.py'}:Swish")
    assert Path(sys.modules["fnpkg.ops"].__file__).resolve() == (PACKAGE / "ops.py").resolve()


def test_a_dotted_module_target_is_found_from_the_current_folder(cli, monkeypatch):
    monkeypatch.chdir(FIXTURES)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(FIXTURES), str(FIXTURES.resolve()))])
    for name in [name for name in sys.modules if name.partition(".")[0] == "fnpkg"]:
        monkeypatch.delitem(sys.modules, name)  # imported by an earlier test: import afresh
    right = cli("check-function", "fnpkg.kernels.scale:SigmoidScale", "--var", "x=[0.5, -1.0]")
    assert right.exit_code == 0, right.stdout + right.stderr
    wrong = cli("check-function", "fnpkg.ops:SwishNoProduct")
    assert wrong.exit_code == 1, wrong.stdout + wrong.stderr
    assert "PROBLEM" in wrong.stdout


def test_a_relative_import_outside_a_package_says_what_to_do(tmp_path):
    (tmp_path / "ops.py").write_text("from .util import helper\n")
    with pytest.raises(UserCodeError) as info:
        check_function(f"{tmp_path / 'ops.py'}:Anything")
    text = info.value.render()
    assert "ImportError: attempted relative import with no known parent package" in text
    assert f'File "{tmp_path / "ops.py"}", line 1, in <module>' in text
    assert "has no __init__.py: add one" in text


def test_an_import_error_inside_a_package_shows_the_users_frames(tmp_path):
    package = tmp_path / "brokenpkg_for_gradcli"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text("from .missing import thing\n")
    with pytest.raises(UserCodeError) as info:
        check_function(f"{package / 'ops.py'}:Anything")
    text = info.value.render()
    assert "No module named 'brokenpkg_for_gradcli.missing'" in text
    assert f'File "{package / "ops.py"}", line 1, in <module>' in text


def test_a_missing_module_is_a_usage_error(cli):
    result = cli("check-function", "no_such_package_for_gradcli.ops:Swish")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no module named 'no_such_package_for_gradcli'")
    assert "Traceback" not in result.stderr


def test_another_package_of_the_same_name_is_refused(tmp_path):
    package = tmp_path / "fnpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text("")
    check_function(f"{PACKAGE / 'ops.py'}:Swish")  # the fixture's fnpkg is imported first
    with pytest.raises(UsageError, match="is in the package 'fnpkg', but another 'fnpkg' is already imported"):
        check_function(f"{package / 'ops.py'}:Swish")


_PRINTING_FUNCTION = '''
import torch


class LoudSin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        print("LoudSin.forward", tuple(x.shape))
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x.cos()
'''


@pytest.mark.parametrize("name", [":LoudSin", ""], ids=["one Function", "every Function in the file"])
def test_a_function_that_prints_keeps_json_parseable(cli, tmp_path, name):
    # gradcheck calls forward dozens of times; under --json those prints go to stderr.
    (tmp_path / "loud_sin_ops.py").write_text(_PRINTING_FUNCTION)
    result = cli("check-function", f"{tmp_path / 'loud_sin_ops.py'}{name}", "--json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["ok"] is True
    assert "LoudSin.forward (14,)" in result.stderr


def test_a_functions_apply_bound_to_a_name_is_checked_as_the_function(cli, tmp_path):
    # `loud_sin = LoudSin.apply` is how torch's documentation names a Function for use; the
    # bound builtin has no signature, which was "cannot read the signature" (exit 2).
    (tmp_path / "applied_sin_ops.py").write_text(_PRINTING_FUNCTION + "\nloud_sin = LoudSin.apply\n")
    for name in ("loud_sin", "LoudSin.apply"):
        result = cli("check-function", f"{tmp_path / 'applied_sin_ops.py'}:{name}", "--ref", "sin(x)", "--order", "2")
        assert result.exit_code == 0, result.stderr
        assert result.stdout.rstrip().endswith(
            f"OK: {tmp_path / 'applied_sin_ops.py'}:{name} agrees with gradcheck, gradgradcheck, the reference sin(x)")
    traced = cli("trace", f"{tmp_path / 'applied_sin_ops.py'}:loud_sin", "--var", "x=[0.0, 1.0]", "--loss", "out.sum()")
    assert traced.exit_code == 0, traced.stderr
    assert "found: torch.autograd.Function LoudSin, called through .apply" in traced.stdout
    assert "x.grad: [1.0, 0.5403]" in traced.stdout
