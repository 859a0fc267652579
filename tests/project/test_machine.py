"""tests/machine.py's probes answer with torch's own verdict, so a skip says what torch said."""

from __future__ import annotations

import torch
from torch import nn

from machine import autocast_refuses, inductor_refuses, torch_refuses


def test_a_refusal_is_torchs_first_line_and_a_run_is_none():
    assert torch_refuses(lambda: torch.ones(2) + torch.ones(3)) == str(_error(lambda: torch.ones(2) + torch.ones(3))).splitlines()[0]
    assert torch_refuses(lambda: torch.ones(2) + 1) is None
    assert autocast_refuses(nn.Linear(3, 2), torch.randn(4, 3), torch.bfloat16) is None


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
