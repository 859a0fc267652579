"""`gradcli watch` on an accelerate loop (`accelerator.backward`, `accelerator.accumulate` over
two micro-batches, `accelerator.clip_grad_norm_`, the AcceleratedOptimizer that steps only when
the gradients are synced): a zero row's 0/0 is stopped at the update torch says, with its line.

The truth is the same loop without gradcli: at each synced update, after clipping, whether every
gradient is finite (torch.isfinite).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("accelerate")

from gradcli.watcher.options import WatchOptions  # noqa: E402
from gradcli.watcher.run import watch_script  # noqa: E402
from gradcli.watcher.script import Script  # noqa: E402

SCRIPT = '''import torch
from accelerate import Accelerator
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.relu(self.fc(x / x.norm(dim=1, keepdim=True)))
        return self.out(h)


def batches(bad):
    g = torch.Generator().manual_seed(0)
    for step in range(12):
        x, y = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
        if bad and step == 7:
            x[3] = 0
        yield x, y


def train(bad, before_step=None):
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    net = Net()
    model, opt = accelerator.prepare(net, torch.optim.Adam(net.parameters(), lr=1e-2))
    for x, y in batches(bad):
        with accelerator.accumulate(model):
            loss = ((model(x) - y) ** 2).mean()
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                if before_step is not None:
                    before_step(model)
            opt.step()
            opt.zero_grad()
    return model


if __name__ == "__main__":
    import sys
    train("--bad" in sys.argv)
'''


def test_an_accelerate_loop_is_stopped_at_torchs_update_with_its_line(tmp_path):
    path = tmp_path / "acc.py"
    path.write_text(SCRIPT)
    namespace: dict = {}
    exec(compile(SCRIPT, str(path), "exec"), namespace)
    finite: list[bool] = []
    namespace["train"](True, lambda model: finite.append(all(bool(torch.isfinite(p.grad).all())
                                                               for p in model.parameters())))
    bad = finite.index(False) + 1
    result = watch_script(Script(str(path), None, ("--bad",)), WatchOptions())
    stop = result.stop
    assert stop is not None and stop.step == bad and result.steps == bad - 1
    line = 1 + SCRIPT.splitlines().index("        h = torch.relu(self.fc(x / x.norm(dim=1, keepdim=True)))")
    assert (stop.origin.file, stop.origin.line) == (str(path), line) and stop.cause.kind == "division_by_zero"
