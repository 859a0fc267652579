"""tests/machine.py's probes answer with torch's own verdict, so a skip says what torch said."""

from __future__ import annotations

import torch
from torch import nn

from machine import autocast_refuses, inductor_refuses, lstm_autocast_refuses, torch_refuses


def test_a_refusal_is_torchs_first_line_and_a_run_is_none():
    assert torch_refuses(lambda: torch.ones(2) + torch.ones(3)) == str(_error(lambda: torch.ones(2) + torch.ones(3))).splitlines()[0]
    assert torch_refuses(lambda: torch.ones(2) + 1) is None
    assert autocast_refuses(nn.Linear(3, 2), torch.randn(4, 3), torch.bfloat16) is None


def test_the_autocast_probe_runs_a_training_step_as_torch_does():
    # the probe's answer is what torch says when the same training step runs here, for an LSTM
    for dtype in (torch.bfloat16, torch.float16):
        torch.manual_seed(0)
        lstm, x = nn.LSTM(8, 16, batch_first=True), torch.randn(2, 3, 8)

        def step():
            with torch.autocast("cpu", dtype=dtype):
                out = lstm(x)[0]
            out.float().sum().backward()

        try:
            step()
            said = None
        except RuntimeError as error:
            said = str(error).splitlines()[0]
        assert lstm_autocast_refuses(dtype) == said
    # and a refused backward is a refusal: a step whose backward raises is not "runs here"
    def refuse(*_):
        raise RuntimeError("no backward here")

    broken = nn.Linear(3, 2)
    broken.register_full_backward_hook(refuse)
    assert autocast_refuses(broken, torch.randn(4, 3), torch.bfloat16) == "no backward here"


def test_inductor_without_a_compiler_is_refused_by_torchs_own_search(monkeypatch):
    from torch._inductor import config

    monkeypatch.delenv("CXX", raising=False)
    with config.patch({"cpp.cxx": ("no-such-c++-compiler",)}):
        refused = inductor_refuses.__wrapped__()
    assert refused is not None and refused.startswith("inductor needs a C++ compiler")


def _error(run):
    try:
        run()
    except RuntimeError as error:
        return error
    raise AssertionError("the premise: torch refuses")
