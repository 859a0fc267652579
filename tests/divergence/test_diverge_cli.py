"""`gradcli diverge` from the shell: the exit statuses (0 within the band, 1 parted, 2 could not
run), the report and --json's keys (docs/json.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from paths import ROOT
from shared_runs import RUNS, shared_json_run

EXAMPLE = ROOT / "examples" / "diverge" / "train.py"


def gradcli(*args: str, scratch: Path | None = None) -> subprocess.CompletedProcess:
    """`gradcli diverge ARGS` as a user runs it; `scratch`: its TMPDIR (where the runs' files go)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "COLUMNS": "200"}
    if scratch is not None:
        scratch.mkdir()
        env["TMPDIR"] = str(scratch)
    return subprocess.run([sys.executable, "-m", "gradcli", "diverge", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_an_unseeded_augmentation_parts_same_at_step_1_in_the_data(tmp_path_factory):
    # the truth: two generators nobody seeds (the script's noise.seed()) draw other numbers
    first, second = torch.Generator(), torch.Generator()
    first.seed(), second.seed()
    assert not torch.equal(torch.randn(4, generator=first), torch.randn(4, generator=second))
    # docs/recipes/diverge.md's example with --json PATH, shared with test_docs.py (in-process;
    # the console script is test_a_script_that_raises_is_exit_2_with_its_own_error's)
    done = shared_json_run("diverge-unseeded", tmp_path_factory)
    assert RUNS["diverge-unseeded"][-3:] == ["--steps", "2", "--unseeded"]
    assert done["exit_code"] == 1, done["stderr"]
    assert not [name for name in done["left_in_tmp"] if name.startswith("gradcli-")], "the runs' files are left behind"
    assert "PARTED at step 1, in the data" in done["stdout"]
    assert "the same setup twice: the script is not reproducible" in done["stdout"]
    document = done["document"]
    assert {"ok", "first_step", "parted", "module", "node", "line", "cause", "band", "series"} <= set(document)
    assert (document["ok"], document["first_step"], document["parted"]) == (False, 1, "data")
    assert document["cause"]["kind"] == "batches-differ" and document["module"] is None
    assert [s["step"] for s in document["series"]] == [1, 2] and document["series"][0]["batch_same"] is False


@pytest.mark.parametrize(("args", "message"), [
    (("--b", "compile:tvm", str(EXAMPLE)), "the backend 'tvm' is not one of"),
    (("--b", "same", "no_such_script.py"), "can't open file 'no_such_script.py'"),
    (("--b", "same"), "gradcli diverge needs a script"),
    (("--steps", "0", str(EXAMPLE)), "--steps 0: give at least 1 step"),
    (("--plot", "gap.txt", str(EXAMPLE)), "cannot tell the picture format of 'gap.txt'"),
])
def test_bad_input_is_one_paragraph_and_exit_2(args, message, cli):
    done = cli("diverge", *args)
    assert done.exit_code == 2
    assert message in done.stderr and "Traceback" not in done.stderr and not done.stdout


def test_a_script_that_raises_is_exit_2_with_its_own_error(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("raise ValueError('no data here')\n")
    done = gradcli("--b", "float64", str(script), scratch=tmp_path / "tmp")
    assert done.returncode == 2
    assert not list((tmp_path / "tmp").glob("gradcli-*")), "a failed run's files are left behind"
    assert "ValueError: no data here" in done.stderr and "failed" in done.stderr
