"""One run of an expensive command for the whole test session, shared by the files that assert
on it, on whichever xdist worker they land.

A module-scoped fixture runs a command once per file; two files that need the same `gradcli
diverge` (three processes and a rerun: ~16 s) ran it twice. Here the first file to ask runs it
in-process (typer's CliRunner, as the `cli` fixture does) and writes its exit status, output and
--json document to the session's own temporary folder; the other waits on the same lock and reads
them. The folder is the session's (xdist's workers share their base folder's parent), so nothing
is reused from an earlier session.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest


#: The shared runs, by name: gradcli's arguments from the project's root, "{json}" standing for
#: the path of the --json document.
RUNS = {
    # examples/diverge/train.py's corrupt batch 2 overflows float16: the run watch stops
    # (tests/divergence/test_diverge_stops.py; tests/project/test_json_docs.py's "stops" keys)
    "diverge-float16-stop": ["diverge", "--b", "autocast:float16", "--json", "{json}", "examples/diverge/train.py",
                             "--steps", "3", "--bad-batch", "2"],
}


def shared_json_run(name: str, tmp_path_factory: pytest.TempPathFactory, columns: str = "160") -> dict[str, Any]:
    """RUNS[name] run once this session (from the project's root): {"exit_code", "stdout",
    "stderr", "document"}, the document being the one written to --json's path."""
    args = RUNS[name]
    folder = _session_folder(tmp_path_factory) / "shared-runs"
    folder.mkdir(exist_ok=True)
    result = folder / f"{name}.json"
    with _locked(folder / f"{name}.lock"):
        if not result.exists():
            written = folder / f"{name}.{os.getpid()}.part"  # whole or absent, even unlocked
            written.write_text(json.dumps(_run(args, folder / f"{name}.{os.getpid()}.document.json", columns)),
                               encoding="utf-8")
            os.replace(written, result)
    return json.loads(result.read_text(encoding="utf-8"))


def _run(args: list[str], document: Path, columns: str) -> dict[str, Any]:
    from typer.testing import CliRunner

    from gradcli.cli import app
    from paths import ROOT

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        done = CliRunner(env={"COLUMNS": columns, "NO_COLOR": "1"}).invoke(
            app, [str(document) if a == "{json}" else a for a in args], catch_exceptions=False)
    return {"exit_code": done.exit_code, "stdout": done.stdout, "stderr": done.stderr,
            "document": json.loads(document.read_text(encoding="utf-8")) if document.exists() else None}


def _session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # .../pytest-N/popen-gwK


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock between the session's processes (fcntl; where there is none, each
    process runs the command itself, which is only slower)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
