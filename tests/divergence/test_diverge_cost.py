"""`gradcli diverge`'s measured cost per step and each run's torch version, in the report and in
--json. The cost is the runs' own timing of what they already do (recorder.py writes each step's
wall time and the time in its hooks); no time is asserted against a limit, only what the numbers
are: medians of the steps after the first, the recorder's part of the step, and its ratio to the
rest."""

from __future__ import annotations

import statistics

import pytest
import torch

from gradcli.divergence.cost import RunCost, cost_of
from gradcli.divergence.runs import RunLog
from gradcli.divergence.setups import RunSetup
from shared_runs import RUNS, shared_json_run

#: The shared run (tests/shared_runs.py: the docs' example, a hook registered after compiling at
#: step 5 of 8): every step is run and timed whatever the verdict.
RUN = "diverge-hook-after-compile"
STEPS = 8


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    assert RUNS[RUN][-4:-2] == ["--steps", str(STEPS)]
    done = shared_json_run(RUN, tmp_path_factory)
    return done, done["document"]


def test_the_cost_is_the_median_step_and_the_recorders_part_of_it():
    log = RunLog(RunSetup(), steps=[{"seconds": 9.0, "recorder_seconds": 5.0},  # the first step: its set-up, left out
                                    {"seconds": 0.010, "recorder_seconds": 0.002},
                                    {"seconds": 0.014, "recorder_seconds": 0.004},
                                    {"seconds": 0.012, "recorder_seconds": 0.003}])
    cost = cost_of(log)
    assert cost == RunCost(3, statistics.median([0.010, 0.014, 0.012]), statistics.median([0.002, 0.004, 0.003]))
    assert cost.script_seconds == pytest.approx(0.012 - 0.003)
    assert cost.overhead == pytest.approx(0.003 / 0.009)
    assert cost_of(RunLog(RunSetup(), steps=[{"seconds": 1.0, "recorder_seconds": 0.5}])) is None  # one step: none timed


def test_each_runs_cost_is_measured_in_the_run_and_reported(run):
    done, document = run
    assert done["exit_code"] == 1 and len(document["series"]) == STEPS, done["stdout"]  # parted at step 5, run to 8
    for side in ("a", "b"):
        cost = document["cost"][side]
        assert cost["steps_timed"] == STEPS - 1
        assert 0 < cost["recorder_seconds"] < cost["step_seconds"]
        assert cost["script_seconds"] == pytest.approx(cost["step_seconds"] - cost["recorder_seconds"])
        assert cost["overhead"] == pytest.approx(cost["recorder_seconds"] / cost["script_seconds"])
        shown = f"  run {side}: {cost['step_seconds'] * 1e3:.3g} ms per step, of which the recorder {cost['recorder_seconds'] * 1e3:.3g} ms"
        assert shown in done["stdout"]
    assert "cost (measured in the runs, side by side on this machine's cores):" in done["stdout"]


def test_each_runs_torch_version_is_in_the_header_and_the_document(run):
    done, document = run
    assert document["a"]["torch"] == document["b"]["torch"] == torch.__version__  # the same interpreter as this one
    header = done["stdout"].splitlines()[0]
    assert header.count(f"; torch {torch.__version__})") == 2
