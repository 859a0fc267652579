"""The runs of one `gradcli diverge`, side by side: one child process per setup (child.py),
started together and waited for together, each writing its JSON lines to a file of its own.

A run that could not be run (the script raised, exited non-zero, or recorded no optimizer
step) is a `RunFailed`: the script's own last lines of stderr, exit status 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserCodeError
from ..watcher.script import Script
from .setups import RunSetup

#: The lines of a failed run's stderr the error shows.
TAIL = 12


class RunFailed(UserCodeError):
    """A run of the script could not be run under its setup: its own error, and its last lines of stderr."""


@dataclass
class RunLog:
    """What one run recorded: its steps (recorder.py's lines) and, located, its modules."""

    setup: RunSetup
    steps: list[dict[str, Any]] = field(default_factory=list)
    modules: list[dict[str, Any]] | None = None
    draws: bool | None = None  # (located) whether the model's forward drew random numbers at that step
    nonfinite: dict[str, Any] | None = None  # (located) the first call whose output held nan or inf
    error: str | None = None
    torch: str | None = None  # the run's torch.__version__
    stop: dict[str, Any] | None = None  # the step watch would stop (recorder.py): step, loss, parameters, optimizer
    watch: dict[str, Any] | None = None  # (watched) watch's own stop record, checks, skipped and notes (child.py)


def launch(script: Script, setups: list[RunSetup], *, steps: int | None, locate: int | None = None,
           watch: bool = False) -> list[RunLog]:
    """Run the script once per setup, all at once; the logs in the order of `setups`. With
    `watch`, gradcli watch runs inside each (child.py)."""
    with tempfile.TemporaryDirectory(prefix="gradcli-diverge-") as scratch:  # the logs are read before it goes
        return _launch(Path(scratch), script, setups, steps=steps, locate=locate, watch=watch)


def _launch(folder: Path, script: Script, setups: list[RunSetup], *, steps: int | None, locate: int | None,
            watch: bool) -> list[RunLog]:
    children = []
    for k, setup in enumerate(setups):
        out = folder / f"run{k}.jsonl"
        spec = {"path": str(Path(script.path).resolve()) if script.path else None, "module": script.module,
                "args": list(script.args),
                "setup": {"kind": setup.kind, "backend": setup.backend, "half": setup.half, "ranks": setup.ranks},
                "steps": steps, "locate": locate, "watch": watch, "out": str(out)}
        (folder / f"run{k}.json").write_text(json.dumps(spec), encoding="utf-8")
        stderr = open(folder / f"run{k}.stderr", "w+", encoding="utf-8")
        process = subprocess.Popen([*_interpreter(setup), "-m", "gradcli.divergence.child", str(folder / f"run{k}.json")],
                                   stdout=subprocess.DEVNULL, stderr=stderr, env=_environment())
        children.append((setup, process, out, stderr))
    ended = []  # every run ends, and its stderr is read, before any is judged (a failed one raises)
    for setup, process, out, stderr in children:
        process.wait()
        with stderr:
            stderr.seek(0)
            ended.append((setup, out, stderr.read(), process.returncode))
    return [_read(*run) for run in ended]


def _interpreter(setup: RunSetup) -> list[str]:
    """How a run is started: this python, another one (python:PATH), or torchrun's N ranks on
    this python, rank 0 writing the run's file (the ranks agree on every step's values)."""
    if setup.kind == "python" and setup.python:
        return [setup.python]
    if setup.kind == "ranks":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={setup.ranks}"]
    return [sys.executable]


def _environment() -> dict[str, str]:
    """This gradcli first on the child's path (the script's folder is put first by run_script)."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    return env


def _read(setup: RunSetup, out: Path, stderr: str, status: int) -> RunLog:
    log = RunLog(setup)
    end = None
    if out.exists():
        for line in out.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["kind"] == "step":
                log.steps.append(record)
            elif record["kind"] == "modules":
                log.modules, log.draws, log.nonfinite = record["modules"], record["draws"], record["nonfinite"]
            elif record["kind"] == "start":
                log.torch = record["torch"]
            elif record["kind"] == "stop":
                log.stop = record
            elif record["kind"] == "watch":
                log.watch = record
            else:
                end = record
    if end is None:
        log.error = f"the run ended without a word (exit status {status})"
    elif end["error"]:
        log.error = end["error"]
    if log.error is not None:
        tail = "\n".join(stderr.strip().splitlines()[-TAIL:])
        raise RunFailed(f"the run under {setup.text} ({setup.describe()}) failed: {log.error}" + (f"\n{tail}" if tail else ""))
    if not log.steps and log.stop is None and log.watch is None:
        raise RunFailed(f"the run under {setup.text} made no optimizer step: diverge compares runs step by step",
                        hint="diverge runs a training script that calls optimizer.step()")
    return log
