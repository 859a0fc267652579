"""`gradcli watch` on a `torch.compile`d model (backend aot_eager, which needs no C++ compiler
and computes what eager computes): the nan is stopped at torch's step with its line, and
nothing torch.compile says about gradcli's own hooks and recorder reaches the user.

The truth is the same loop run eagerly without gradcli: the first step whose loss is not
finite; the line is found in the script's source.
"""

from __future__ import annotations

import textwrap
import warnings

import torch

from gradcli.watcher.options import WatchOptions
from gradcli.watcher.run import watch_script
from gradcli.watcher.script import Script

SCRIPT = textwrap.dedent('''
    import sys
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.out = nn.Linear(4, 1)

        def forward(self, x):
            h = torch.relu(self.fc(x))
            return self.out(h / h.norm(dim=1, keepdim=True))


    def train(compiled, losses):
        torch.manual_seed(0)
        net = Net()
        model = torch.compile(net, backend="aot_eager") if compiled else net
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(6):
            x = torch.randn(8, 4)
            if step == 3:
                x[2] = -1e3 * net.fc.weight.sum(0).sign()  # every unit of fc off for row 2: h = 0, 0/0
            loss = model(x).pow(2).mean()
            losses.append(float(loss.detach()))
            opt.zero_grad()
            loss.backward()
            opt.step()


    if __name__ == "__main__":
        train(True, [])
''')


def test_a_compiled_model_is_stopped_at_torchs_step_with_its_line_and_no_compile_warning(tmp_path, capfd):
    script = tmp_path / "compiled.py"
    script.write_text(SCRIPT)
    namespace: dict = {}
    exec(compile(SCRIPT, str(script), "exec"), namespace)
    losses: list[float] = []
    namespace["train"](False, losses)  # eager, unwatched: torch's own losses
    bad = next(i + 1 for i, v in enumerate(losses) if not torch.isfinite(torch.tensor(v)))
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        result = watch_script(Script(str(script), None), WatchOptions())
    stop = result.stop
    assert stop is not None and stop.step == bad
    line = 1 + SCRIPT.splitlines().index("        return self.out(h / h.norm(dim=1, keepdim=True))")
    assert (stop.origin.file, stop.origin.line) == (str(script), line) and stop.cause.kind == "division_by_zero"
    err = capfd.readouterr().err
    assert "Graph break" not in err and "gradcli/" not in err and "global hooks" not in err, err
    said = [str(w.message) for w in shown if "compile" in str(w.message) or "gradcli" in w.filename]
    assert said == []
