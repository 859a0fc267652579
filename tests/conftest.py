"""Shared test helpers: the CLI through typer's CliRunner at a fixed width."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from typer.testing import CliRunner

from gradcli.cli import app

# The everyday suite (and CI) draws the same hypothesis examples on every run, so a result is
# reproducible and a slow example cannot appear by chance; GRADCLI_SLOW=1 explores afresh.
settings.register_profile("everyday", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile("explore" if os.environ.get("GRADCLI_SLOW", "") not in ("", "0") else "everyday")

os.environ.setdefault("COLUMNS", "120")
os.environ["NO_COLOR"] = "1"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # A worker of `-n auto` is one process per core: one torch thread in it (and in the processes
    # it starts: the CLI runs, the ranks), or two workers would spin four threads on two cores
    # (a 110-step MLP run took 5.6 s with two threads against 0.33 s with one on a busy machine).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def cli():
    """Run gradcli with arguments; returns click's Result (exit_code, stdout, stderr)."""
    runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1"})

    def run(*args: str, input: str | None = None):
        return runner.invoke(app, list(args), input=input, catch_exceptions=False)

    return run
