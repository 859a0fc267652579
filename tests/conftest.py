"""Shared test helpers: the CLI through typer's CliRunner at a fixed width."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from gradcli.cli import app

os.environ.setdefault("COLUMNS", "120")
os.environ["NO_COLOR"] = "1"


@pytest.fixture
def cli():
    """Run gradcli with arguments; returns click's Result (exit_code, stdout, stderr)."""
    runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1"})

    def run(*args: str, input: str | None = None):
        return runner.invoke(app, list(args), input=input, catch_exceptions=False)

    return run
