"""What a torchviz user runs instead of `gradcli trace bench/model.py:DeepMLP --json`:
forward, then `make_dot(loss, params=dict(model.named_parameters())).source` on stdout.

torchviz recurses once per node: the recursion limit is raised and the work runs in a thread
with a big stack, as for the chain (torchviz_chain.py)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    from torchviz import make_dot

    from model import model_and_loss

    model, loss = model_and_loss()
    sys.stdout.write(make_dot(loss, params=dict(model.named_parameters())).source)


if __name__ == "__main__":
    sys.setrecursionlimit(100_000)
    threading.stack_size(512 * 1024 * 1024)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            main()
        except BaseException as exc:  # reported below, so that a failure is exit status 1
            failed.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if failed:
        raise SystemExit(f"torchviz_model failed: {failed[0]!r}")
