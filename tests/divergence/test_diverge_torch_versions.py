"""`gradcli diverge --b python:PATH`: the same seeded MLP script under this torch and under another
installed one (issue 47's healthy pair "torch 2.13 against another installed torch version").
The other interpreter is $GRADCLI_OTHER_TORCH_PYTHON (a venv with another torch; gradcli's source
is put on its path by diverge). The truth is the script's loop run by hand under both
interpreters, its per-step losses compared here against the band the float32 and float64 loops
of this torch measure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gradcli.divergence.band import FACTOR, UNIT
from paths import ROOT

EXAMPLE = ROOT / "examples" / "diverge" / "train.py"
STEPS = 200
OTHER = os.environ.get("GRADCLI_OTHER_TORCH_PYTHON")

#: The script's loop by hand, run by either interpreter: its torch version and each step's loss,
#: in float32 and with the model and data in float64.
LOOP = """
import importlib.util, json, sys
import torch
spec = importlib.util.spec_from_file_location("example", sys.argv[1])
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
found = {"torch": torch.__version__}
for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
    torch.manual_seed(0)
    model = example.MLP().to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(1)
    losses = []
    for step in range(int(sys.argv[2])):
        x = torch.randn(32, 8, generator=data)
        y = torch.sin(x.sum(dim=1, keepdim=True))
        loss = torch.nn.functional.mse_loss(model(x.to(dtype)), y.to(dtype))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    found[name] = losses
print(json.dumps(found))
"""


def by_hand(python: str) -> dict:
    done = subprocess.run([python, "-c", LOOP, str(EXAMPLE), str(STEPS)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.skipif(OTHER is None, reason="GRADCLI_OTHER_TORCH_PYTHON is unset: give the python of a venv with another "
                                          "torch (e.g. /work/venv213/bin/python with torch 2.13.0)")
def test_another_torch_version_on_a_plain_mlp_stays_within_the_band(tmp_path):
    from typer.testing import CliRunner

    from gradcli.cli import app

    here, other = by_hand(sys.executable), by_hand(OTHER)
    assert here["torch"] != other["torch"], "GRADCLI_OTHER_TORCH_PYTHON has this torch version: nothing to compare"
    # by hand: every step's loss under the other torch is within the band of this torch's float32 drift
    for step, (a, b, x32, x64) in enumerate(zip(here["float32"], other["float32"], here["float32"], here["float64"]), 1):
        band = FACTOR * (abs(x32 - x64) + UNIT["float32"] * abs(x64))
        assert abs(a - b) <= band, (step, a, b, band)
    path = tmp_path / "diverge.json"
    done = CliRunner(env={"COLUMNS": "160", "NO_COLOR": "1"}).invoke(
        app, ["diverge", "--b", f"python:{OTHER}", "--json", str(path), str(EXAMPLE), "--steps", str(STEPS)],
        catch_exceptions=False)
    assert done.exit_code == 0, done.stdout
    document = json.loads(path.read_text())
    assert (document["a"]["torch"], document["b"]["torch"]) == (here["torch"], other["torch"])
    assert f"; torch {other['torch']})" in done.stdout.splitlines()[0]
    assert len(document["series"]) == STEPS and document["first_step"] is None
    # the runs recorded the losses the loops compute by hand, each under its own torch
    assert [s["loss"][0] for s in document["series"]] == pytest.approx(here["float32"], rel=1e-6)
    assert [s["loss"][1] for s in document["series"]] == pytest.approx(other["float32"], rel=1e-6)
