"""The hostile-input corpus (hostile_inputs.toml) through the command line.

Every case must end with its expected exit status (2 and a one-paragraph message for a
refusal, or a correct result), with no traceback, no side effect (no marker file, nothing
new in the working folder) and in bounded time. The cases run in two worker processes (this
file run as a script: `python tests/cli/test_hostile.py --worker`), each importing gradcli once
and running its cases through typer's CliRunner, with a per-case watchdog of HANG_GUARD
seconds that is only a guard against hangs, not a performance assertion. The slow mode
(`GRADCLI_SLOW=1 pytest -m slow tests/cli/test_hostile.py`) runs every case in its own
`python -m gradcli` process instead.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

# tests/hostile_inputs.toml, beside the shared helpers; found from __file__ (not tests/paths.py)
# because this file also runs as a script, with its own folder as sys.path[0].
CORPUS = Path(__file__).resolve().parent.parent / "hostile_inputs.toml"
CASES: list[dict[str, Any]] = tomllib.loads(CORPUS.read_text(encoding="utf-8"))["case"]
#: Seconds one case may take before it is called a hang (a guard, far above any real run).
HANG_GUARD = 60
WORKERS = 2


def expand(text: str, folder: Path) -> str:
    text = re.sub(r"@repeat:(.*?):(\d+)@", lambda m: m.group(1) * int(m.group(2)), text)
    return (text.replace("{marker}", str(folder / "MARKER"))
            .replace("{missing}", str(folder / "no-such-file")).replace("{dir}", str(folder)))


def materialise(case: dict[str, Any], root: Path) -> dict[str, Any]:
    """The case's folder with its files, and its command line, stdin and environment."""
    folder = root / case["id"]
    folder.mkdir(parents=True)
    for name, text in case.get("files", {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(expand(text, folder), encoding="utf-8")
    for name, hex_bytes in case.get("files_hex", {}).items():
        (folder / name).write_bytes(bytes.fromhex(hex_bytes))
    stdin = bytes.fromhex(case["stdin_hex"]) if "stdin_hex" in case else case.get("stdin", "").encode()
    return {
        "id": case["id"], "folder": str(folder), "args": [expand(a, folder) for a in case["args"]],
        "stdin": base64.b64encode(stdin).decode(), "env": case.get("env", {}),
        "before": sorted(str(p.relative_to(folder)) for p in folder.rglob("*")),
    }


def assert_handled(case: dict[str, Any], run: dict[str, Any], outcome: dict[str, Any] | None) -> None:
    folder = Path(run["folder"])
    assert outcome is not None, f"{case['id']}: never finished (a hang, or the worker died before it)"
    assert not outcome.get("hung"), f"{case['id']}: still running after {HANG_GUARD} s"
    assert outcome["exception"] is None, f"{case['id']}: crashed\n{outcome['traceback']}"
    stdout, stderr = outcome["stdout"], outcome["stderr"]
    assert "Traceback" not in stderr, f"{case['id']}: a traceback on stderr\n{stderr}"
    assert outcome["exit_code"] == case["expect"], (
        f"{case['id']}: exit {outcome['exit_code']}, expected {case['expect']}\n"
        f"stderr: {stderr[:2000]}\nstdout: {stdout[:2000]}"
    )
    if case["expect"] == 2:
        assert stderr.startswith(("error: ", "Usage: ")), f"{case['id']}: not a message\n{stderr}"
        assert case["message"] in stderr, f"{case['id']}: {case['message']!r} not in\n{stderr}"
    else:
        assert case["message"] in stdout, f"{case['id']}: {case['message']!r} not in\n{stdout[:3000]}"
    assert not (folder / "MARKER").exists(), f"{case['id']}: injected code ran (the marker file exists)"
    after = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts)
    assert after == run["before"], f"{case['id']}: files appeared: {sorted(set(after) - set(run['before']))}"


# -- in worker processes (CI) ---------------------------------------------------------------
@pytest.fixture(scope="module")
def worker_outcomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    root = tmp_path_factory.mktemp("hostile")
    runs = {case["id"]: materialise(case, root) for case in CASES}
    batches = [list(runs.values())[i::WORKERS] for i in range(WORKERS)]
    workers = [
        subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=root)
        for _ in batches
    ]
    outcomes: dict[str, Any] = {}
    for worker, batch in zip(workers, batches):
        out, _ = worker.communicate(json.dumps(batch).encode(), timeout=HANG_GUARD * (len(batch) + 2))
        for line in out.decode().splitlines():
            if line.startswith("{"):
                outcome = json.loads(line)
                outcomes[outcome["id"]] = outcome
    return runs, outcomes


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_hostile_input_is_refused_cleanly(case: dict[str, Any], worker_outcomes: Any):
    runs, outcomes = worker_outcomes
    assert_handled(case, runs[case["id"]], outcomes.get(case["id"]))


def test_corpus_covers_the_issue():
    ids = " ".join(c["id"] for c in CASES)
    for kind in ("injection", "dunder", "subscript", "lambda", "string", "null-byte", "deep", "huge",
                 "ragged", "mismatch", "dim-out-of-range", "nan", "inf", "function-file-missing", "demo-unknown",
                 # issue 18, section 3
                 "seed-beyond", "overflows-float", "wrong-sign", "var-empty", "beyond-int64", "above-limit",
                 "constant-zero", "tolerance", "json-with-nan", "sys-exit", "order-2", "plot-axis", "library-domain"):
        assert kind in ids, f"no {kind} case"
    assert len({c["id"] for c in CASES}) == len(CASES), "case ids repeat"


# -- bounded work, in process -----------------------------------------------------------------
def test_symbolic_differentiation_over_budget_falls_back_to_gradcheck(monkeypatch: pytest.MonkeyPatch):
    import gradcli
    from gradcli.exact import elementwise

    monkeypatch.setattr(elementwise, "SYMBOLIC_BUDGET", 0.05)
    result = gradcli.check("x" + ".sin().exp().cos()" * 60, ["x=[0.1, 0.2]"])
    assert "longer than 0.05 s" in (result.symbolic_skipped or ""), str(result)
    assert result.gradcheck.ok is True and result.ok


def test_simplification_over_budget_shows_the_unsimplified_form():
    import sympy

    from gradcli.exact.symbolic import simplify_all

    x = sympy.Symbol("x", real=True)
    expr = sympy.sin(x) ** 2 + sympy.cos(x) ** 2
    assert simplify_all({"x": expr}, budget=0.0) == {"x": expr}
    assert simplify_all({"x": expr}, budget=60.0) == {"x": 1}


def test_within_stops_waiting_at_its_budget():
    import threading

    from gradcli.exact.symbolic import SymbolicTimeout, within

    release = threading.Event()
    # a wait no exception interrupts: within gives up at 0.01 s; the event is set a little later
    # so that its stop (which waits up to STOP_WAIT for the thread to end) is not waited out
    later = threading.Timer(0.2, release.set)
    later.start()
    with pytest.raises(SymbolicTimeout, match="longer than 0.01 s"):
        within(0.01, release.wait, 600)
    later.join()


@pytest.mark.parametrize("expression, variables", [
    ("(x * y).sum()", ["x=ones(20000, 1)", "y=ones(1, 20000)"]),
    ("(x @ y).sum()", ["x=ones(20000, 1)", "y=ones(1, 20000)"]),
    ("x.sum()", ["x=zeros(100000, 100000)"]),
])
def test_sizes_are_refused_before_any_allocation(monkeypatch: pytest.MonkeyPatch, expression: str, variables: list[str]):
    import torch

    from gradcli.errors import LimitError
    from gradcli.pipeline import build_prepared, prepare

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a tensor operation ran before the size check")

    with pytest.raises(LimitError, match="the limit is 50,000,000"):
        prepared = prepare(expression, variables, seed=0)
        for name in ("mul", "matmul", "__mul__", "__matmul__"):
            monkeypatch.setattr(torch.Tensor, name, refuse)
        monkeypatch.setattr(torch, "matmul", refuse)
        build_prepared(prepared)


def test_check_points_are_refused_before_any_allocation(monkeypatch: pytest.MonkeyPatch):
    import torch

    import gradcli
    from gradcli.errors import LimitError

    monkeypatch.setattr(torch, "rand", lambda *a, **k: pytest.fail("points were drawn before the size check"))
    with pytest.raises(LimitError, match="--points"):
        gradcli.check("sin(x)", points=10**12)


def test_a_user_function_that_raises_is_a_user_code_error_naming_it():
    import torch

    import gradcli
    from gradcli.errors import UserCodeError

    class Broken(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise ZeroDivisionError("my own mistake")

    with pytest.raises(UserCodeError, match="my own mistake"):
        gradcli.check_function(Broken)


def _worker() -> None:
    """Run the cases given as JSON on stdin; print one JSON line per case."""
    import threading
    import traceback

    from typer.testing import CliRunner

    from gradcli.cli import app

    for run in json.loads(sys.stdin.read()):
        watchdog = threading.Timer(HANG_GUARD, lambda run=run: (
            print(json.dumps({"id": run["id"], "hung": True}), flush=True), os._exit(3)))
        watchdog.start()
        os.chdir(run["folder"])
        runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", **run["env"]})
        start = time.perf_counter()
        result = runner.invoke(app, run["args"], input=base64.b64decode(run["stdin"]), catch_exceptions=True)
        watchdog.cancel()
        crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
        print(json.dumps({
            "id": run["id"], "exit_code": result.exit_code, "stdout": result.stdout,
            "stderr": result.stderr[:100_000], "seconds": time.perf_counter() - start,
            "exception": repr(result.exception) if crashed else None,
            "traceback": "".join(traceback.format_exception(*result.exc_info)) if crashed else None,
        }), flush=True)


# -- one process per case (slow mode) -------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_hostile_input_in_its_own_process(case: dict[str, Any], tmp_path: Path):
    run = materialise(case, tmp_path)
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", **run["env"]}
    try:
        done = subprocess.run([sys.executable, "-m", "gradcli", *run["args"]], input=base64.b64decode(run["stdin"]),
                              capture_output=True, cwd=run["folder"], env=env, timeout=HANG_GUARD)
        outcome = {"exit_code": done.returncode, "stdout": done.stdout.decode(errors="replace"),
                   "stderr": done.stderr.decode(errors="replace"), "exception": None}
    except subprocess.TimeoutExpired:
        outcome = {"hung": True}
    assert_handled(case, run, outcome)


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    _worker()
