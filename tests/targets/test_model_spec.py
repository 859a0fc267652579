"""The model options are one record (targets/spec.py's ModelSpec), built once at the command
line, and every maker of a model reads it: on_model (grads, memory, compare), trace's code
target and the distributed runs. The weights each makes are torch's own under the seed."""

from __future__ import annotations

import ast

import torch

from gradcli.targets.base import BuildSettings
from gradcli.targets.model import model_run, on_model
from gradcli.targets.resolve import as_target
from gradcli.targets.spec import ModelSpec
from paths import ROOT

TARGET = "examples/grads/healthy.py:MLP"


def torchs_own(seed: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The MLP's weights as torch makes them under the seed, without gradcli."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("healthy_for_spec", ROOT / "examples" / "grads" / "healthy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(seed)
    return {n: p.detach().to(dtype) for n, p in module.MLP().named_parameters()}


def test_on_model_trace_and_the_ranks_make_torchs_weights_from_one_spec():
    spec = ModelSpec.of(TARGET, ["x=randn(4, 32)"], loss="out.pow(2).mean()", seed=11, dtype="float64")
    truth = torchs_own(11, torch.float64)

    def weights(model, args, kwargs, loss_fn):
        class Seen:
            params = {n: p.detach().clone() for n, p in model.named_parameters()}
        return Seen()

    judged = on_model(weights, spec, purpose="a test")
    assert judged.seed == 11 and judged.target == TARGET
    with model_run(spec, purpose="a test") as run:
        ran = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    built = as_target(spec.target, spec.var, loss=spec.loss).build(BuildSettings(dtype="float64", seed=11))
    traced = {n: t for n, t in built.leaves.items() if n in truth}
    for name, value in truth.items():
        assert torch.equal(judged.params[name], value) and torch.equal(ran[name], value) and torch.equal(traced[name].detach(), value)
    assert {t.dtype for t in (*judged.params.values(), *ran.values(), *traced.values())} == {torch.float64}


def test_the_command_line_builds_the_record_once_and_declares_dtype_and_plot_once():
    cli = ROOT / "gradcli" / "cli"
    declared = {flag: [] for flag in ("--dtype", "--plot", "--var", "--init", "--loss", "--loss-init", "--seed", "--device")}
    for path in sorted(cli.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Option" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and first.value in declared:
                    declared[first.value].append(path.name)
    assert declared == {flag: ["app.py"] for flag in declared}
    # every model-level command hands the library the record, not the options one by one
    for name in ("grads.py", "memory.py", "compare.py"):
        text = (cli / name).read_text(encoding="utf-8")
        assert "model_spec(" in text and "on_model(" in text and "library_dirs=" not in text
