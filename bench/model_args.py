"""The benchmark model's sizes and gradcli's command line for it, without importing torch.

`run.py` needs the command line; importing `model.py` for it would load torch into the
benchmark's own process, and every child forked from it would then report the parent's
~500 MB as its peak memory (Linux keeps `ru_maxrss` across `exec`).
"""

from __future__ import annotations

from pathlib import Path

BLOCKS = 550
WIDTH = 16
BATCH = 8
SEED = 0

#: The gradcli command line for the model's computation (model.py: DeepMLP, same seed).
GRADCLI_ARGS = [
    "trace", f"{Path(__file__).with_name('model.py')}:DeepMLP", "--var", f"x=randn({BATCH},{WIDTH})",
    "--loss", "out.pow(2).mean()", "--seed", str(SEED),
]
