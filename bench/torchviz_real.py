"""What a torchviz user runs instead of `gradcli trace MODEL --json` on a real architecture:
build the model (real_models.py: same seed, inputs and loss), forward, then
`make_dot(loss, params=dict(model.named_parameters())).source` on stdout.

    python bench/torchviz_real.py resnet18|gpt2
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deep_recursion import run_deep  # noqa: E402


def main() -> None:
    from torchviz import make_dot

    import real_models

    build = {"resnet18": real_models.resnet_and_loss, "gpt2": real_models.gpt2_and_loss}[sys.argv[1]]
    model, loss = build()
    sys.stdout.write(make_dot(loss, params=dict(model.named_parameters())).source)


if __name__ == "__main__":
    run_deep(main, 100_000, "torchviz_real")
