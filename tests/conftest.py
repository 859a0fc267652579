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


#: The files that take longest (most of it in processes they start: diverge's runs, the docs'
#: examples, gloo ranks, sympy on large formulas), in the order xdist should hand them out: with
#: `--dist loadfile` a worker takes a whole file, and a long file handed out last leaves the other
#: core idle while it runs (test_order2_arbiter.py, 2 tests and ~30 s, came last among files
#: ordered by their test count). Longest first; the rest follow by test count, as xdist orders
#: them itself. From each test's CPU and wall time on 2026-12-05 (inductor's C++ compile counted at
#: a cold cache, as on a fresh machine: test_compare_compile.py ~30 s against ~10 s warm);
#: tests/project/test_layout.py checks that each still exists.
LONGEST_FIRST = (
    "project/test_docs.py", "divergence/test_diverge.py", "project/test_json_docs.py",
    "distributed/test_distributed.py", "comparison/test_compare_compile.py", "language/test_properties.py",
    "divergence/test_diverge_ranks.py", "watcher/test_watch_ranks.py", "cli/test_hostile.py",
    "verify/finite_differences/test_order2_arbiter.py", "language/test_address_space_cap.py",
    "watcher/test_watch_joined.py", "watcher/test_watch.py", "verify/causes/test_causes.py",
    "watcher/test_watch_cli.py", "divergence/test_diverge_cli.py", "divergence/test_diverge_stops.py",
    "cli/test_cli_basics.py", "exact/test_maxima.py", "divergence/test_diverge_cost.py", "project/test_bench.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first, then by test count; a file's tests stay together, in order."""
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0].removeprefix("tests/")

    counts: dict[str, int] = {}
    for item in items:
        counts[file_of(item)] = counts.get(file_of(item), 0) + 1
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: (rank.get(file_of(item), len(rank)), -counts[file_of(item)], file_of(item)))


@pytest.fixture
def cli():
    """Run gradcli with arguments; returns click's Result (exit_code, stdout, stderr)."""
    runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1"})

    def run(*args: str, input: str | None = None):
        return runner.invoke(app, list(args), input=input, catch_exceptions=False)

    return run
