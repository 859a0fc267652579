"""One run of an expensive command for the whole test session, shared by the files that assert
on it, on whichever xdist worker they land.

A module-scoped fixture runs a command once per file; two files that need the same `gradcli
diverge` (three processes and a rerun: ~16 s) ran it twice. Here the first file to ask runs it
in-process (typer's CliRunner, as the `cli` fixture does) and writes its exit status, output and
--json document to the session's own temporary folder; the other waits on the same lock and reads
them. The folder is the session's (xdist's workers share their base folder's parent), so nothing
is reused from an earlier session.

A page's example that is one of these commands without its `--json PATH` (diverge writes the
document beside its report, so the report is the same) is read from here too
(tests/project/test_docs.py, `shown_as`), at the pages' width.
"""

from __future__ import annotations

import json
import os
import pickle
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
    # a hook registered after compiling (test_json_docs.py's keys; the README's and
    # docs/commands/diverge.md's example; tests/divergence/test_diverge.py's `hooked`)
    "diverge-hook-after-compile": ["diverge", "--b", "compile:aot_eager", "--json", "{json}", "examples/diverge/train.py",
                                   "--steps", "8", "--hook-at", "5"],
    # float32 against float64, which stay in the band they measure (diverge --help's example;
    # tests/divergence/test_diverge.py's `float64`)
    "diverge-float64": ["diverge", "--b", "float64", "--json", "{json}", "examples/diverge/train.py", "--steps", "2"],
    # an augmentation nobody seeds (tests/divergence/test_diverge_cli.py; docs/recipes/diverge.md's example)
    "diverge-unseeded": ["diverge", "--b", "same", "--json", "{json}", "examples/diverge/train.py", "--steps", "2",
                         "--unseeded"],
}


def shown_as(args: list[str]) -> str | None:
    """The shared run that is `gradcli ARGS` with a `--json PATH` added, if any."""
    for name, run in RUNS.items():
        at = run.index("{json}")
        if run[:at - 1] + run[at + 1:] == args:
            return name
    return None


def shared_json_run(name: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """RUNS[name] run once this session (from the project's root, at the pages' width):
    {"exit_code", "stdout", "stderr", "output", "document", "left_in_tmp"}, the document being
    the one written to --json's path, and left_in_tmp the names the run left in its own TMPDIR."""
    args = RUNS[name]
    folder = _session_folder(tmp_path_factory) / "shared-runs"
    folder.mkdir(exist_ok=True)
    result = folder / f"{name}.json"
    with _locked(folder / f"{name}.lock"):
        if not result.exists():
            written = folder / f"{name}.{os.getpid()}.part"  # whole or absent, even unlocked
            run = _run(args, folder / f"{name}.{os.getpid()}", folder / f"{name}.result.pickle")
            written.write_text(json.dumps(run), encoding="utf-8")
            os.replace(written, result)
    return json.loads(result.read_text(encoding="utf-8"))


def shared_result(name: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The result object RUNS[name] showed (the one its report and document were rendered
    from, e.g. a DivergeResult), from the same single run as shared_json_run's."""
    shared_json_run(name, tmp_path_factory)
    folder = _session_folder(tmp_path_factory) / "shared-runs"
    return pickle.loads((folder / f"{name}.result.pickle").read_bytes())


def _run(args: list[str], stem: Path, shown_path: Path) -> dict[str, Any]:
    import tempfile

    from typer.testing import CliRunner

    import gradcli.cli.output
    from doc_pages import WIDTH
    from gradcli.cli import app
    from paths import ROOT

    document, scratch = stem.with_suffix(".document.json"), stem.with_suffix(".tmp")
    scratch.mkdir()
    shown = []
    show = gradcli.cli.output.show

    def recorded(result: Any, *rest: Any, **options: Any) -> None:
        shown.append(result)
        show(result, *rest, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        patch.setattr(tempfile, "tempdir", str(scratch))  # the run's own TMPDIR: what it leaves is seen
        patch.setattr(gradcli.cli.output, "show", recorded)
        done = CliRunner(env={"COLUMNS": WIDTH, "NO_COLOR": "1"}).invoke(
            app, [str(document) if a == "{json}" else a for a in args], catch_exceptions=False)
    if shown:  # written before the run's JSON appears: whoever reads that finds this too
        shown_path.write_bytes(pickle.dumps(shown[-1]))
    return {"exit_code": done.exit_code, "stdout": done.stdout, "stderr": done.stderr, "output": done.output,
            "document": json.loads(document.read_text(encoding="utf-8")) if document.exists() else None,
            "left_in_tmp": sorted(p.name for p in scratch.iterdir())}


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
