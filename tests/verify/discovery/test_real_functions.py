"""check-function on Functions as real packages write them (issue 24, case 3).

Each case is established by calling torch (or Python's import system) directly in the test:
integer targets, a Python `dim` beside a tensor, a file inside a package, vmap readiness, the
order-2 guard past 1,000 elements and a missing optional dependency in a package walk.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest
import torch

from gradcli import check_function
from gradcli.verify.discovery.check import check_discovered
from paths import FIXTURES

DB = f"{FIXTURES / 'torch_db_functions.py'}"


def _gradcheck(fn, *inputs, **flags) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.autograd.gradcheck(fn, inputs, raise_exception=False, **flags)


def test_a_list_of_ints_is_an_int64_tensor_as_torch_makes_it():
    sys.path.insert(0, str(FIXTURES))
    try:
        from target_functions import TargetLogSoftmax
    finally:
        sys.path.remove(str(FIXTURES))
    target = torch.tensor([0, 2])
    assert target.dtype == torch.int64 and torch.tensor([0.0, 2.0]).dtype.is_floating_point
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(lambda x: TargetLogSoftmax.apply(x, target), x)
    with pytest.raises(RuntimeError, match="scatter"):  # what a float target does in torch
        TargetLogSoftmax.apply(x, target.double())

    result = check_function(f"{FIXTURES / 'target_functions.py'}:TargetLogSoftmax", ["x=randn(2,3)", "target=[0, 2]"])
    assert result.ok, result.verdict()
    value = result.inputs.values[result.inputs.names.index("target")]
    assert value.dtype == torch.int64 and value.tolist() == [0, 2]
    assert result.inputs.tensors().keys() == {"x"}  # data, not differentiated


def test_a_python_dim_of_a_new_style_function_arrives_as_an_int():
    sys.path.insert(0, str(FIXTURES))
    try:
        from torch_db_functions import NumpySort
    finally:
        sys.path.remove(str(FIXTURES))
    x = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    with pytest.raises(TypeError):
        NumpySort.apply(x, torch.tensor(1.0))  # a tensor dim is not an index: forward cannot run
    # torch's own gradcheck: the sort's forward returns x as it came (not sorted), while its
    # backward permutes the gradient, so its gradient is wrong
    assert not _gradcheck(lambda x: NumpySort.apply(x, 1)[0], x)

    result = check_function(f"{DB}:NumpySort", ["x=randn(3,5)", "dim=1"], seed=0)
    dim = result.inputs.values[result.inputs.names.index("dim")]
    assert type(dim) is int and dim == 1
    assert not result.ok and result.gradcheck.ok is False
    assert sum(c.count for c in result.first) > 0  # entries shown wrong, from a forward that ran


def test_a_file_inside_a_package_is_imported_as_part_of_it(monkeypatch):
    # The package's parent is on sys.path already (as site-packages is for an installed
    # package); the file's own folder must not go before it, or shadowmax/shadowmax.py shadows
    # the package it imports from.
    monkeypatch.setattr(sys, "path", [*sys.path, str(FIXTURES)])
    for name in [m for m in sys.modules if m == "shadowmax" or m.startswith("shadowmax.")]:
        monkeypatch.delitem(sys.modules, name)
    module = importlib.import_module("shadowmax.shadowmax")  # Python's own import: it works
    x = torch.linspace(-3, 3, 7, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(module.Shadowmax.apply, x)
    for name in [m for m in sys.modules if m == "shadowmax" or m.startswith("shadowmax.")]:
        monkeypatch.delitem(sys.modules, name)

    result = check_function(f"{FIXTURES / 'shadowmax' / 'shadowmax.py'}:Shadowmax", ["x=linspace(-3, 3, 7)"])
    assert result.ok, result.verdict()
    assert str(FIXTURES / "shadowmax") not in sys.path[: sys.path.index(str(FIXTURES))]


def test_vmap_readiness_is_reported_as_readiness_not_as_a_wrong_gradient():
    sys.path.insert(0, str(FIXTURES))
    try:
        from torch_db_functions import NumpyExp_
    finally:
        sys.path.remove(str(FIXTURES))
    x = torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert _gradcheck(lambda x: NumpyExp_.apply(x.clone()), x.clone().requires_grad_(True))
    with warnings.catch_warnings(), pytest.raises(Exception, match="While computing batched gradients"):
        warnings.simplefilter("ignore")
        torch.autograd.gradcheck(lambda x: NumpyExp_.apply(x.clone()), (x.clone().requires_grad_(True),),
                                 check_batched_grad=True)

    result = check_function(f"{DB}:NumpyExp_", ["x=randn(5)"], seed=0)
    assert result.ok, result.verdict()
    assert "aten::detach" in result.transforms.vmap_readiness
    assert result.transforms.batched.ok is None
    assert result.as_dict()["transforms"]["vmap_readiness"] == result.transforms.vmap_readiness


def test_torchs_own_function_db_when_it_imports():
    pytest.importorskip("expecttest", reason="torch's autograd_function_db imports expecttest, not installed here")
    db = "torch.testing._internal.autograd_function_db"
    assert check_function(f"{db}:NumpyExp_", ["x=randn(5)"], seed=0).ok
    sort = check_function(f"{db}:NumpySort", ["x=randn(3,5)", "dim=1"], seed=0)
    assert sort.inputs.values[1] == 1 and sort.gradcheck.ok is False


def test_the_order_2_guard_past_1000_elements_catches_a_wrong_double_backward():
    # Past 1,000 elements only gradgradcheck (fast mode) guards the double backward: were it
    # made to always pass, this verdict would turn OK.
    sys.path.insert(0, str(FIXTURES))
    try:
        from functions import SwishSavedSigmoid
    finally:
        sys.path.remove(str(FIXTURES))
    x = torch.randn(1100, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    (g,) = torch.autograd.grad(SwishSavedSigmoid.apply(x).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    xt = x.detach().clone().requires_grad_(True)
    (gt,) = torch.autograd.grad(torch.nn.functional.silu(xt).sum(), xt, create_graph=True)
    (ht,) = torch.autograd.grad(gt.sum(), xt)
    assert torch.allclose(g, gt) and not torch.allclose(h, ht, atol=1e-3)  # right once, wrong twice

    result = check_function(f"{FIXTURES / 'functions.py'}:SwishSavedSigmoid", ["x=randn(1100)"], order=2, seed=0)
    assert result.gradcheck.ok is True and result.gradgradcheck.ok is False
    assert not result.ok


def test_a_missing_optional_dependency_in_a_package_walk_is_a_note(tmp_path, monkeypatch):
    package = tmp_path / "gradcli_optional_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text((FIXTURES / "discover_pkg" / "right.py").read_text())
    (package / "tf_bridge.py").write_text("import gradcli_missing_tensorflow_stand_in  # noqa: F401\n")
    (package / "broken.py").write_text("from gradcli_optional_pkg import not_a_module  # noqa: F401\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, missing in (("tf_bridge", "gradcli_missing_tensorflow_stand_in"),
                          ("broken", "gradcli_optional_pkg.not_a_module")):
        with pytest.raises(ImportError) as raised:  # what Python says of each
            importlib.import_module(f"gradcli_optional_pkg.{name}")
        assert getattr(raised.value, "name", missing) in (missing, "gradcli_optional_pkg")

    result = check_discovered(str(package))
    assert {e.status for e in result.entries} == {"ok"}
    assert [(m.name, m.reason) for m in result.missing] == [
        (f"{package}/tf_bridge.py", "gradcli_missing_tensorflow_stand_in")]
    assert [m.name for m in result.unimportable] == [f"{package}/broken.py"]  # its own module: a failure
    assert not result.ok
    (package / "broken.py").unlink()
    for name in [m for m in sys.modules if m.startswith("gradcli_optional_pkg")]:
        monkeypatch.delitem(sys.modules, name)
    result = check_discovered(str(package))
    assert result.ok and result.verdict().startswith("OK")
    assert any("gradcli_missing_tensorflow_stand_in" in note for note in result.notes)
