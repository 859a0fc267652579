"""`torchrun --nproc-per-node 2 -m gradcli watch examples/watch/ddp.py` (gloo, CPU), under DDP and
under FSDP2 (`--fsdp`: each rank holds a shard of each gradient): only rank 1's targets hold an
inf at step 3. Both ranks must stop at step 3 (one all-reduce of a flag tensor
decides together: a rank stopping alone would leave the other waiting), both must name rank 1,
and torchrun must return with no process of the script left.

The truth: torch computes rank 1's loss on its step-3 batch (the script's own data, drawn from
the generator seeded with the rank) and finds it non-finite, and rank 0's finite.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from paths import ROOT

EXAMPLE = ROOT / "examples" / "watch" / "ddp.py"
AT = 3


def rank_batch(rank: int, step: int):
    data = torch.Generator().manual_seed(rank)
    for s in range(1, step + 1):
        x, y = torch.randn(8, 4, generator=data), torch.randn(8, 1, generator=data)
        if rank == 1 and s == AT:
            y[0, 0] = float("inf")
    return x, y


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without torch.distributed")
@pytest.mark.parametrize("sharding", [[], ["--fsdp"]], ids=["ddp", "fsdp2"])
def test_both_ranks_stop_at_the_step_and_name_the_rank_whose_loss_was_not_finite(tmp_path, sharding):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    with torch.no_grad():  # whatever the weights after two steps, an inf target makes the loss inf
        finite = {r: math.isfinite(float(((model(rank_batch(r, AT)[0]) - rank_batch(r, AT)[1]) ** 2).mean()))
                  for r in (0, 1)}
    assert finite == {0: True, 1: False}  # torch: only rank 1's step-3 loss is not finite
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    out = tmp_path / "watch.json"
    # torchrun ends the other ranks once one has exited non-zero, when it next looks (every
    # --monitor-interval seconds, 0.1 by default): 5 s leaves both ranks time to write their
    # report, which a busy machine did not have.
    run = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "--monitor-interval", "5",
                          "-m", "gradcli", "watch", "-q",
                          "--json", str(out), "--step-log", str(tmp_path / "steps.jsonl"), str(EXAMPLE), "--at", str(AT),
                          *sharding],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode != 0, run.stderr  # a stop is exit status 1 on each rank
    documents = [json.loads(out.read_text()), json.loads((tmp_path / "watch.rank1.json").read_text())]
    for document in documents:
        assert document["steps"] == AT - 1 and document["stop"]["step"] == AT
        assert document["stop"]["ranks"] == [1]
    assert documents[1]["stop"]["kind"] == "nonfinite_loss"  # rank 1's own loss
    # one log per rank (--step-log: torchrun would read --log as its own --log-dir, abbreviated)
    for log in (tmp_path / "steps.jsonl", tmp_path / "steps.rank1.jsonl"):
        assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == list(range(1, AT + 1))
    assert run.stderr.count(f"stopped at step {AT} of SGD") == 2 and "on rank(s) 1" in run.stderr
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(EXAMPLE) in _cmdline(p)]
    assert left == []


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
