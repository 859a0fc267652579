"""What a torchviz user runs instead of `gradcli trace bench/model.py:DeepMLP --json`:
forward, then `make_dot(loss, params=dict(model.named_parameters())).source` on stdout.

torchviz recurses once per node: the recursion limit is raised and the work runs in a thread
with a big stack, as for the chain (torchviz_chain.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deep_recursion import run_deep  # noqa: E402


def main() -> None:
    from torchviz import make_dot

    from model import model_and_loss

    model, loss = model_and_loss()
    sys.stdout.write(make_dot(loss, params=dict(model.named_parameters())).source)


if __name__ == "__main__":
    run_deep(main, 100_000, "torchviz_model")
