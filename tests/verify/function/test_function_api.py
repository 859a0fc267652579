"""`gradcli.check_function` from Python: its result prints what `gradcli check-function` prints.

The text of a check-function result exists once (render/function.py); the Python API's
FunctionCheck is the library's FunctionResult with that text as `str()` and the `--json`
document as `.to_json()`. Pinned byte for byte against the command on a pipe (100 columns,
no colour) for a right Function, wrong ones at first and second order, skipped outputs and
a matrix input.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import gradcli
from gradcli.api import FunctionCheck
from gradcli.cli import app
from gradcli.verify.function.check import FunctionResult
from paths import ROOT


RUNS = {
    "right, with a reference, order 2": ("examples/swish.py:Swish", [], {"ref": "x*sigmoid(x)", "order": 2}),
    "saved sigmoid: wrong at order 2": ("examples/swish_saved_sigmoid.py:Swish", [],
                                        {"ref": "x*sigmoid(x)", "order": 2}),
    "kinks and a not-tested block": ("tests/fixtures/verdict_functions.py:Entmax15", ["x=[1.0, 0.5, -2.0]"],
                                     {"order": 2}),
    "wrong backward, jvp and torch.func": ("tests/fixtures/transform_functions.py:SwishWrongBackward", [], {}),
    "skipped outputs, a matrix input": ("examples/typed_functions.py:SoftmaxArgmax",
                                        ["x=[[1.0, 2.0], [0.5, -1.0]]"], {}),
}


def command(target: str, var: list[str], options: dict) -> list[str]:
    args = ["check-function", target, *(a for v in var for a in ("--var", v))]
    return args + [a for k, v in options.items() for a in (f"--{k}", str(v))]


@pytest.fixture
def pipe(monkeypatch):
    """The command as a pipe runs it: no COLUMNS (100 columns), no colour, from the checkout."""
    monkeypatch.chdir(ROOT)
    runner = CliRunner(env={"COLUMNS": None, "NO_COLOR": "1"})
    return lambda args: runner.invoke(app, args, catch_exceptions=False)


def torch_verdict(target: str, inputs: list, order: int, ref: str | None) -> bool:
    """torch's own verdict on the Function at the check's inputs: gradcheck (and gradgradcheck
    at order 2) of its differentiable outputs, and its gradient against autograd's of the
    reference (x*sigmoid(x) is the one reference used here)."""
    import importlib.util

    import torch

    path, name = target.split(":")
    spec = importlib.util.spec_from_file_location(f"verdict_{name}", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, name)
    tensors = [i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)]

    def apply(*ts):
        args = list(inputs)
        for i, t in zip(tensors, ts):
            args[i] = t
        out = function.apply(*args)
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad)  # marked non-differentiable: left out

    leaves = tuple(inputs[i].detach().clone().requires_grad_(True) for i in tensors)
    ok = torch.autograd.gradcheck(apply, leaves, raise_exception=False)
    if order == 2:
        ok = ok and torch.autograd.gradgradcheck(apply, leaves, raise_exception=False)
    if ref is not None:
        assert ref == "x*sigmoid(x)"
        (x,) = leaves
        (mine,) = torch.autograd.grad(apply(x)[0].sum(), x)
        (truth,) = torch.autograd.grad((x * torch.sigmoid(x)).sum(), x)
        ok = ok and torch.allclose(mine, truth, rtol=1e-7, atol=1e-10)
    return bool(ok)


@pytest.mark.parametrize("name", RUNS)
def test_str_of_the_result_is_what_the_command_prints(pipe, name):
    target, var, options = RUNS[name]
    result = gradcli.check_function(target, var, **options)
    # the verdict both paths print is torch's, at the inputs the check used
    assert result.ok is torch_verdict(target, result.inputs.values, options.get("order", 1), options.get("ref"))
    shown = pipe(command(target, var, options))
    assert shown.exit_code == (0 if result.ok else 1)
    assert str(result) + "\n" == shown.stdout
    assert json.loads(result.to_json()) == json.loads(pipe([*command(target, var, options), "--json"]).stdout)


def test_the_public_result_is_the_library_result_with_its_text(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = gradcli.check_function("examples/swish.py:Swish", ref="x*sigmoid(x)")
    assert isinstance(result, FunctionCheck) and isinstance(result, FunctionResult)
    lines = str(result).splitlines()
    assert lines[0] == "check-function examples/swish.py:Swish   (order 1, seed 0)"
    assert lines[1] == "x = [-6.0, -4.0, -3.0, -1.5, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0, 3.5, 4.0] (default)"
    assert lines[-1] == "OK: examples/swish.py:Swish agrees with gradcheck, the reference x*sigmoid(x)"
    assert json.loads(result.to_json()) == json.loads(json.dumps(result.as_dict()))
