"""What this machine's torch can run, asked of torch itself.

A test whose premise depends on the CPU or on the torch build (a bfloat16 or float16 LSTM
under CPU autocast needs a oneDNN that can build the primitive; inductor needs a C++
compiler) asks torch here first and skips with torch's own reason, rather than failing on a
machine that lacks it or passing on a premise nobody checked.
"""

from __future__ import annotations

import functools

import torch


def torch_refuses(run) -> str | None:
    """torch's own first line of error when it cannot `run()` here, or None when it can."""
    try:
        run()
    except RuntimeError as error:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    return None


def autocast_refuses(model, x, dtype: torch.dtype) -> str | None:
    """Why torch cannot run `model(x)` under CPU autocast in `dtype` here, or None."""

    def forward():
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
            model(x)

    return torch_refuses(forward)


@functools.cache
def inductor_refuses() -> str | None:
    """Why inductor cannot compile C++ here (torch's own search for a compiler), or None."""
    from torch._inductor import cpp_builder

    try:
        cpp_builder.get_cpp_compiler()
    except Exception as error:  # torch raises its InvalidCxxCompiler (or an OSError) when none is found
        return f"inductor needs a C++ compiler: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
    return None
