"""The plain script `gradcli trace bench/model.py:DeepMLP --flow` is compared with: the same
forward and backward, nothing else (what a user runs to see whether the loss is finite)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model import model_and_loss  # noqa: E402

model, loss = model_and_loss()
loss.backward()
print(loss.item(), all(p.grad is not None for p in model.parameters()))
