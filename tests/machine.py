"""What this machine's torch can run, asked of torch itself.

A test whose premise depends on the CPU or on the torch build (a bfloat16 or float16 LSTM
under CPU autocast needs a oneDNN that can build the primitive; inductor needs a C++
compiler) asks torch here first and skips with torch's own reason, rather than failing on a
machine that lacks it or passing on a premise nobody checked.
"""

from __future__ import annotations

import copy
import functools

import torch
from torch import nn


def torch_refuses(run) -> str | None:
    """torch's own first line of error when it cannot `run()` here, or None when it can."""
    try:
        run()
    except RuntimeError as error:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    return None


def autocast_refuses(model, x, dtype: torch.dtype) -> str | None:
    """Why torch cannot run a training step of `model(x)` under CPU autocast in `dtype` here, or None.

    Forward with gradients and backward, on a copy, as `compare` and a training loop run it: oneDNN
    builds another primitive for a forward that keeps what backward needs than for inference, and
    on some CPUs it builds the inference one and not the training one (a bfloat16 LSTM).
    """
    work = copy.deepcopy(model)

    def step():
        with torch.autocast("cpu", dtype=dtype):
            out = work(x)
        first = out[0] if isinstance(out, (tuple, list)) else out  # nn.LSTM: (output, (h, c))
        first.float().sum().backward()

    return torch_refuses(step)


@functools.cache
def lstm_autocast_refuses(dtype: torch.dtype) -> str | None:
    """Why torch cannot run an LSTM's training step under CPU autocast in `dtype` here, or None.

    oneDNN on some CPUs cannot build the LSTM primitive in bfloat16 or float16 (torch says: "could
    not create a primitive descriptor for the LSTM forward propagation primitive"). Asked once per
    dtype, with a small LSTM drawn without touching the caller's random state.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        lstm, x = nn.LSTM(8, 16, batch_first=True), torch.randn(2, 3, 8)
    return autocast_refuses(lstm, x, dtype)


@functools.cache
def inductor_refuses() -> str | None:
    """Why inductor cannot compile C++ here (torch's own search for a compiler), or None."""
    from torch._inductor import cpp_builder

    try:
        cpp_builder.get_cpp_compiler()
    except Exception as error:  # torch raises its InvalidCxxCompiler (or an OSError) when none is found
        return f"inductor needs a C++ compiler: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
    return None
