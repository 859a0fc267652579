"""What a torchviz user runs instead of `gradcli trace @chain.txt --json`: the same chain of
sin operations built in torch, drawn with `make_dot(...).source`, the DOT text on stdout.

    python bench/torchviz_chain.py 20000 > chain.dot

torchviz is a bench-only dependency (`pip install torchviz`). Its `make_dot` recurses once
per node, so a 20,000-operation chain needs a raised recursion limit (and a thread with a
big stack, as a careful user would give it, or CPython's C stack may overflow).
"""

from __future__ import annotations

import sys

from deep_recursion import run_deep


def main(ops: int) -> None:
    import torch
    from torchviz import make_dot

    x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    h = x
    for _ in range(ops):
        h = torch.sin(h)
    sys.stdout.write(make_dot(h, params={"x": x}).source)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    run_deep(lambda: main(count), 10 * count + 10_000, "torchviz_chain")
