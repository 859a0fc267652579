"""Every command's result follows gradcli/outcome.py's protocol, and the exit status is `not ok`.

The result classes are enumerated from the package itself (every class the JSON writer renders
is one), so a new command's result cannot skip the protocol unnoticed. For each, a passing and
a failing case run for real: `ok` is `not problems`, every problem is a `Problem` record (data,
not a sentence), the document and `str()` exist and say the same `ok`, and the command's exit
status is `not ok`. The truth of "passing" and "failing" is the fixture's (a right and a wrong
backward, a finite and a non-finite gradient), not gradcli's output.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn

import gradcli
from outcome_protocol import COVERED, ELSEWHERE, follows_the_protocol
from paths import ROOT

FUNCTIONS = "tests/fixtures/functions.py"
FAULTS = ROOT / "examples" / "grads" / "faults.py"
HEALTHY = ROOT / "examples" / "grads" / "healthy.py"
MEMORY_MLP = ROOT / "examples" / "memory" / "mlp.py"
COMPARE_MLP = ROOT / "examples" / "compare" / "models.py"
BROKEN = ROOT / "tests" / "fixtures" / "models" / "broken.py"
SQUARE = ["--loss", "out.pow(2).mean()"]


@pytest.fixture(autouse=True)
def from_the_checkout(monkeypatch):
    monkeypatch.chdir(ROOT)


def _model(path: Path, name: str) -> nn.Module:
    """An instance of the model class `name` defined in the file `path`, seeded."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_outcome_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return getattr(module, name)()


def _grads(path: Path, name: str, *shape: int):
    return gradcli.grads(_model(path, name), torch.randn(*shape), loss=lambda out: out.pow(2).mean())


def _memory(path: Path, name: str, *shape: int):
    return gradcli.memory(_model(path, name), torch.randn(*shape), loss=lambda out: out.pow(2).mean(), checkpoint=0)


def _compare(loss_scale: float):
    model = _model(COMPARE_MLP, "MLP")
    torch.manual_seed(0)
    return gradcli.compare(model, torch.randn(16, 32), loss=lambda out: loss_scale * out.pow(2).mean(), amp="float16")


def _library_check(*entries: tuple[str, list[str]]):
    from gradcli.verify.expression.result import LibraryCheck

    return LibraryCheck([gradcli.check(e, var, seed=7) for e, var in entries])


def _plot(expression: str, var: list[str]):
    from gradcli.plot.data import plot_data

    return plot_data(expression, var)


def _demo(name: str, **options):
    from gradcli.demos import run_demo

    return run_demo(name, **options)


def _discovery(target: str):
    from gradcli.verify.discovery.check import check_discovered

    return check_discovered(target, seed=0)


WATCH_TRAIN = ROOT / "examples" / "watch" / "train.py"


def _watch(fault: str):
    """examples/watch/train.py's loop (5 steps, the fault at step 3) under gradcli.watch()."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("watch_train_outcome", WATCH_TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with gradcli.watch() as watched:
        try:
            module.train("mlp", fault, 5, 3)
        except gradcli.WatchStop:
            pass
    return watched.result


# (id, library call, the same run from the command line, whether it should pass)
CASES = [
    ("trace-ok", lambda: gradcli.trace("(x*x).sum()", ["x=[1.0, 2.0]"]),
     ["trace", "(x*x).sum()", "--var", "x=[1.0, 2.0]"], True),
    ("trace-nonfinite", lambda: gradcli.trace("sqrt(x).sum()", ["x=[0.0, 1.0]"]),
     ["trace", "sqrt(x).sum()", "--var", "x=[0.0, 1.0]"], False),
    ("check-ok", lambda: gradcli.check("x*sigmoid(x)", seed=7), ["check", "x*sigmoid(x)", "--seed", "7"], True),
    # where(x > 0, sqrt(x), 0): the untaken branch's nan leaks into the gradient at x < 0
    ("check-wrong", lambda: gradcli.check("where(x > 0, sqrt(x), 0)", ["x=linspace(-2,2,41)"], seed=7),
     ["check", "where(x > 0, sqrt(x), 0)", "--var", "x=linspace(-2,2,41)", "--seed", "7"], False),
    ("check-all", lambda: _library_check(("x*sigmoid(x)", []), ("where(x > 0, sqrt(x), 0)", ["x=linspace(-2,2,41)"])), None, False),
    ("function-ok", lambda: gradcli.check_function(f"{FUNCTIONS}:MulRight", seed=0),
     ["check-function", f"{FUNCTIONS}:MulRight", "--seed", "0"], True),
    ("function-wrong", lambda: gradcli.check_function(f"{FUNCTIONS}:SinFlipped", seed=0),
     ["check-function", f"{FUNCTIONS}:SinFlipped", "--seed", "0"], False),
    ("discovery", lambda: _discovery("tests/fixtures/discover_module.py"),
     ["check-function", "tests/fixtures/discover_module.py", "--seed", "0"], False),
    ("grads-ok", lambda: _grads(HEALTHY, "MLP", 64, 32),
     ["grads", f"{HEALTHY}:MLP", "--var", "x=randn(64, 32)", *SQUARE, "--seed", "0"], True),
    ("grads-detached", lambda: _grads(FAULTS, "DetachedBranch", 16, 8),
     ["grads", f"{FAULTS}:DetachedBranch", "--var", "x=randn(16, 8)", *SQUARE, "--seed", "0"], False),
    ("memory-ok", lambda: _memory(MEMORY_MLP, "MLP", 4, 256),
     ["memory", f"{MEMORY_MLP}:MLP", "--var", "x=randn(4, 256)", *SQUARE, "--seed", "0", "--checkpoint", "0"], True),
    # an in-place write to the output sigmoid saved: backward raises
    ("memory-raises", lambda: _memory(BROKEN, "SigmoidScaled", 2, 3),
     ["memory", f"{BROKEN}:SigmoidScaled", "--var", "x=randn(2, 3)", "--seed", "0", "--checkpoint", "0"], False),
    ("compare-ok", lambda: _compare(1.0),
     ["compare", f"{COMPARE_MLP}:MLP", "--var", "x=randn(16, 32)", *SQUARE, "--amp", "float16", "--seed", "0"], True),
    # a loss scaled to 1e-7 without a GradScaler: float16 gradients flush to zero
    ("compare-underflow", lambda: _compare(1e-7),
     ["compare", f"{COMPARE_MLP}:MLP", "--var", "x=randn(16, 32)", "--loss", "1e-7 * out.pow(2).mean()", "--amp", "float16",
      "--seed", "0"], False),
    ("plot-ok", lambda: _plot("x*sigmoid(x)", []), ["plot", "x*sigmoid(x)", "--json"], True),
    # log(1+exp(x)) overflows past x = 709.78: autograd's nan where the derivative is 1
    ("plot-wrong", lambda: _plot("log(1+exp(x))", ["x=linspace(-800,800,2001)"]),
     ["plot", "log(1+exp(x))", "--var", "x=linspace(-800,800,2001)", "--json"], False),
    ("demo-ok", lambda: _demo("graph"), ["demo", "graph", "--json"], True),
    # --buggy runs the classic mistakes through the checks that catch them, failing on purpose
    ("demo-buggy", lambda: _demo("swish", buggy=True), ["demo", "swish", "--buggy", "--json"], False),
    ("watch-ok", lambda: _watch("none"), ["watch", "-q", str(WATCH_TRAIN), "--steps", "5", "--at", "3"], True),
    # an inf in step 3's batch: stopped before it is applied
    ("watch-stopped", lambda: _watch("inf_batch"),
     ["watch", "-q", str(WATCH_TRAIN), "--fault", "inf_batch", "--steps", "5", "--at", "3"], False),
]


def result_classes() -> set[str]:
    """Every result class in the package: the subclasses of outcome.Reported, found by importing
    every module (the public API's rendering subclasses, gradcli/api.py's, left out)."""
    import importlib
    import pkgutil

    from gradcli.outcome import Reported

    for module in pkgutil.walk_packages(gradcli.__path__, "gradcli."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found, pending = set(), list(Reported.__subclasses__())
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        if cls.__module__ != "gradcli.api":
            found.add(cls.__name__)
    return found


def test_every_result_class_is_covered_by_a_case_here():
    assert result_classes() == COVERED | set(ELSEWHERE), "a result class without a passing and a failing case"


def _dynamic_kinds() -> dict[str, list[str]]:
    """The kinds the two computed `Problem(...)` kinds can take, from the types they come from:
    compare's flags and a discovered Function's statuses."""
    from typing import get_args

    from gradcli.comparison.gradients import Flag
    from gradcli.verify.discovery.check import Status

    return {
        "f'gradient-{flag.value.lower()}'": [f"gradient-{flag.value.lower()}" for flag in Flag if flag is not Flag.AGREES],
        "entry.status.replace(' ', '-')": [status.replace(" ", "-") for status in get_args(Status) if status != "ok"],
    }


def problem_kinds(package: Path) -> dict[str, str]:
    """Every problem kind the package at `package` makes, read from its source: the first
    argument of each `Problem(...)` call -> the file that makes it. A computed kind must be one
    of _dynamic_kinds' expressions (else it is reported as the expression itself)."""
    dynamic = _dynamic_kinds()
    kinds = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Problem"):
                continue
            first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "kind"), None)
            where = f"{path.relative_to(package.parent)}:{node.lineno}"
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                kinds.setdefault(first.value, where)
            else:
                text = ast.unparse(first) if first is not None else "(no kind)"
                for kind in dynamic.get(text, [f"<computed: {text}>"]):
                    kinds.setdefault(kind, where)
    return kinds


def test_every_problem_kind_has_its_sentence_and_every_sentence_its_kind():
    from gradcli.outcome import SENTENCES

    result_classes()  # imports every module: each declares its kinds' sentences beside its result
    made = problem_kinds(ROOT / "gradcli")
    assert len(made) > 20
    assert {kind: where for kind, where in made.items() if kind not in SENTENCES} == {}
    assert sorted(set(SENTENCES) - set(made)) == []  # no sentence left for a kind nothing makes


def test_the_kind_finder_sees_a_planted_kind_without_a_sentence(tmp_path):
    # The test above is only as good as the finder: a new module making a new kind (plainly,
    # and computed in a way the finder does not know) is seen, and has no sentence.
    from gradcli.outcome import SENTENCES, Problem, say

    package = tmp_path / "gradcli"
    package.mkdir()
    (package / "planted.py").write_text(
        "from gradcli.outcome import Problem\n"
        "def problems(name):\n"
        "    return [Problem('planted-kind', name), Problem(kind=f'planted-{name}')]\n")
    made = problem_kinds(package)
    assert made == {"planted-kind": "gradcli/planted.py:3", "<computed: f'planted-{name}'>": "gradcli/planted.py:3"}
    assert "planted-kind" not in SENTENCES
    with pytest.raises(ValueError, match="no sentence for a problem of kind 'planted-kind'"):
        say(Problem("planted-kind"))


@pytest.mark.parametrize(("library", "command", "passes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_result_follows_the_protocol(library, command, passes, cli):
    result = library()
    follows_the_protocol(result, passes)
    if command is not None:
        assert cli(*command).exit_code == int(not result.ok)


def test_the_results_proven_elsewhere_are_proven_there():
    for name, where in ELSEWHERE.items():
        path, _, test = where.partition("::")
        assert f"def {test}(" in (ROOT / path).read_text(encoding="utf-8"), (name, where)
