"""Documented limits on input size, each checked before any work or allocation.

They exist so that no input can make gradcli hang or exhaust memory: a refused input is an
exit-2 error that names the limit. The values are generous for real use (a 20,000-statement
program, 10^7 points) and far below what would take minutes or gigabytes.
"""

from __future__ import annotations

import math

#: Characters in one expression (after reading @FILE or stdin).
MAX_SOURCE_CHARS = 2_000_000
#: Statements in one program.
MAX_STATEMENTS = 100_000
#: Nodes of gradcli's AST (library calls count their arguments, not their bodies).
MAX_AST_NODES = 500_000
#: Depth of the AST: a left-nested sum of N terms is N deep.
MAX_DEPTH = 25_000
#: Elements of any one tensor (a --var, or the result of a broadcast or matmul).
MAX_ELEMENTS = 50_000_000
#: Elements of all --var tensors together.
MAX_TOTAL_ELEMENTS = 100_000_000
#: Magnitude of a constant (a literal, or a constant power like 9**9**9).
MAX_CONSTANT = 1e300
#: Magnitude of a constant exponent handed to sympy (x**N is expanded to N terms by some rewrites).
MAX_SYMBOLIC_EXPONENT = 10_000


def check_power(base: float, exponent: float) -> bool:
    """Whether base**exponent stays within MAX_CONSTANT (without computing it)."""
    try:
        b, x = abs(float(base)), float(exponent)
    except OverflowError:
        return False
    if b in (0.0, 1.0) or x == 0:
        return True
    if not (math.isfinite(b) and math.isfinite(x)):
        return False
    return x * math.log10(b) <= math.log10(MAX_CONSTANT)


def describe() -> str:
    """The limits as a short paragraph, for `--help` and the README."""
    return (
        f"expressions up to {MAX_SOURCE_CHARS:,} characters, {MAX_STATEMENTS:,} statements, "
        f"{MAX_AST_NODES:,} nodes and {MAX_DEPTH:,} levels deep; tensors up to "
        f"{MAX_ELEMENTS:,} elements each and {MAX_TOTAL_ELEMENTS:,} in all; constants up to "
        f"{MAX_CONSTANT:g} in magnitude."
    )
