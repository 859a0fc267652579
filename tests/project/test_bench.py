"""bench/: the comparisons are declared consistently, and the check-function alternatives reach
the verdicts gradcli reaches on the same Functions, so their times are of equal jobs.

No timing here (timings are bench/run.py's, as ratios): only what each side finds.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

BENCH = ROOT / "bench"


def _bench_module(name: str):
    """A bench/ script imported by path, with sys.path and bench's helper modules (programs,
    model_args) left as they were."""
    path, helpers = list(sys.path), {f.stem for f in BENCH.glob("*.py")} - set(sys.modules)
    spec = importlib.util.spec_from_file_location(f"gradcli_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        sys.path.insert(0, str(BENCH))
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = path
        for helper in helpers:
            sys.modules.pop(helper, None)


@pytest.fixture(scope="module")
def run_module(tmp_path_factory):
    """bench/run.py (it imports no torch: see its memory note) and its commands."""
    run = _bench_module("run")
    return run, run.commands(tmp_path_factory.mktemp("bench"))


def test_every_comparison_names_declared_commands_and_every_command_is_compared(run_module):
    run, commands = run_module
    used = {name for c in run.COMPARISONS for name in c.names()}
    assert used <= set(commands), used - set(commands)
    assert set(commands) - used == set()
    assert len({c.key for c in run.COMPARISONS}) == len(run.COMPARISONS)
    for name in ("function", "handwritten_function", "function_package", "handwritten_function_ci",
                 "handwritten_function_bare", "handwritten_function_ci_bare"):
        script = commands[name].argv[-1] if name.startswith("handwritten") else commands[name].argv[2].partition(":")[0]
        assert Path(script).exists(), (name, script)
    # The package holds a deliberately wrong Function: both sides must say so with exit 1.
    assert [commands[n].expect for n in ("function_package", "handwritten_function_ci",
                                         "handwritten_function_ci_bare")] == [1, 1, 1]


def test_the_hand_written_function_check_agrees_with_gradcli():
    from gradcli.verify.function.check import check_function

    done = subprocess.run([sys.executable, str(BENCH / "handwritten_function.py")], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.partition(":")[0] for line in lines] == [
        "forward vs sympy", "first derivative vs sympy", "second derivative vs sympy", "gradcheck", "gradgradcheck"]
    for line in lines[:3]:
        found = re.fullmatch(r".*: ok \(max abs err (\S+)\)", line)
        assert found and float(found[1]) <= 1e-12, line  # float64 rounding, far inside the tolerances
    assert lines[3:] == ["gradcheck: passed", "gradgradcheck: passed"]
    ours = check_function(f"{ROOT / 'examples' / 'swish.py'}:Swish", ref="x*sigmoid(x)", order=2)
    assert ours.ok and ours.gradcheck.ok and ours.gradgradcheck.ok
    # The script's inputs are gradcli's default inputs (read from its text: importing it would
    # put examples/ on this process's sys.path).
    tree = ast.parse((BENCH / "handwritten_function.py").read_text())
    (inputs,) = [ast.literal_eval(n.value) for n in tree.body
                 if isinstance(n, ast.Assign) and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["INPUTS"]]
    assert ours.inputs.values[0].tolist() == inputs

def test_the_hand_written_ci_loop_finds_what_gradcli_finds_and_the_wrapper_keeps_its_status():
    from gradcli.verify.discovery.check import check_discovered

    # Under as_gradcli_exits.py, as the like-for-like bench row runs it: the output is flushed
    # before os._exit and the script's exit status is kept.
    done = subprocess.run([sys.executable, str(BENCH / "as_gradcli_exits.py"), str(BENCH / "handwritten_function_ci.py")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert sorted(done.stdout.splitlines()) == [
        "FAILED   custom_ops.activations.LeakyReLU",
        "ok       custom_ops.activations.Swish",
        "ok       custom_ops.norms.RMSNorm",
        "ok       custom_ops.quantize.StraightThroughRound",
    ]
    ours = check_discovered(str(ROOT / "examples" / "custom_ops"))
    statuses = {entry.name.rpartition(":")[2]: entry.status for entry in ours.entries}
    assert statuses == {"Swish": "ok", "LeakyReLU": "wrong", "RMSNorm": "ok", "StraightThroughRound": "could not run"}
    assert not ours.ok
