"""The benchmark's programs, written once so gradcli and the comparison scripts see one graph.

Each function returns gradcli program text (one statement a line) for `gradcli trace @FILE`;
`torchviz_chain.py` builds the same chain directly in torch, as a user of torchviz would.
"""

from __future__ import annotations

#: The operation repeated in a chain: one SinBackward0 node per step, each saving its input.
CHAIN_OP = "sin"


def chain(ops: int) -> str:
    """`ops` operations in a row: h = sin(x); h = sin(h); ...; sin(h)."""
    if ops < 1:
        raise ValueError("a chain has at least one operation")
    if ops == 1:
        return f"{CHAIN_OP}(x)\n"
    lines = [f"h = {CHAIN_OP}(x)"] + [f"h = {CHAIN_OP}(h)"] * (ops - 2) + [f"{CHAIN_OP}(h)"]
    return "\n".join(lines) + "\n"


def doubling_dag(levels: int) -> str:
    """`levels` times h = h*h + h (two nodes a level, 2^levels paths from the output to x)."""
    lines = ["h = x*x + x"] + ["h = h*h + h"] * (levels - 1) + ["h"]
    return "\n".join(lines) + "\n"
