"""Documented limits on input size, each checked before any work or allocation.

They exist so that no input can make gradcli hang or exhaust memory: a refused input is an
exit-2 error that names the limit. The values are generous for real use (a 20,000-statement
program, 10^7 points) and far below what would take minutes or gigabytes.
"""

from __future__ import annotations

import math

from .errors import LimitError

#: Characters in one expression (after reading @FILE or stdin).
MAX_SOURCE_CHARS = 2_000_000
#: Bytes read from @FILE, stdin or a library file: room for MAX_SOURCE_CHARS characters of
#: UTF-8 (up to 4 bytes each); reading stops one byte past it.
MAX_FILE_BYTES = 4 * MAX_SOURCE_CHARS
#: Statements in one program.
MAX_STATEMENTS = 100_000
#: Nodes of gradcli's AST (library calls count their arguments, not their bodies).
MAX_AST_NODES = 500_000
#: Depth of the AST: a left-nested sum of N terms is N deep.
MAX_DEPTH = 25_000
#: Elements of any one tensor (a --var, or the result of a broadcast or matmul).
MAX_ELEMENTS = 50_000_000
#: Elements of all --var tensors together (and of a check's points for all its variables).
#: Measured: `trace --json` of one 50,000,000-element variable peaks at 13.2 GB (the document
#: holds values and gradients in full); two such variables ran out of this 24 GB machine.
MAX_TOTAL_ELEMENTS = 50_000_000
#: Elements times the nodes of the (inlined) program: torch saves about one tensor per
#: operation, so memory grows with both. 50,000,000 elements through a 4-node program.
MAX_WORK = 200_000_000
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


#: Peak bytes per value and node (measured: `trace --json` of 50,000,000 values through 4 nodes
#: peaked at 13.2 GB; `check` of 50,000,000 points of sin at 3.9 GB). The constants above were
#: measured on a 24 GB machine; on a smaller or busier one the same input ran out of memory
#: (a MemoryError traceback), so the work is also held to the memory this machine has now.
BYTES_PER_VALUE_NODE = 66
#: Share of the available memory one run may plan to use.
MEMORY_SHARE = 0.8
#: Where Linux says how much memory can be had without swapping (MemAvailable).
MEMINFO = "/proc/meminfo"


def available_memory() -> int | None:
    """Bytes this machine can give now: Linux's MemAvailable, else its physical memory
    (os.sysconf), else None (not known: only the constant limits apply)."""
    import os

    try:
        with open(MEMINFO, encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def check_work(elements: int, nodes: int) -> None:
    """Refuse `elements` values pushed through `nodes` operations beyond MAX_WORK, or beyond
    what this machine's memory can hold (`check_memory`)."""
    if elements * nodes > MAX_WORK:
        raise LimitError(
            f"{elements:,} values through {nodes:,} nodes is {elements * nodes:,} element-operations; "
            f"the limit is {MAX_WORK:,}",
            hint="use fewer values (a smaller --var or --points) or a shorter expression",
        )
    check_memory(elements * max(nodes, 1) * BYTES_PER_VALUE_NODE,
                 f"{elements:,} values through {nodes:,} node{'s' if nodes != 1 else ''}")


def check_memory(needed: int, what: str) -> None:
    """Refuse work estimated to need more than MEMORY_SHARE of the memory available now."""
    available = available_memory()
    if available is None or needed <= MEMORY_SHARE * available:
        return
    raise LimitError(
        f"{what} would need about {needed / 1e9:.1f} GB, and this machine has {available / 1e9:.1f} GB available",
        hint="use fewer values (a smaller --var or --points), or run it where more memory is free",
    )


def describe() -> str:
    """The limits as a short paragraph, for `--help` and the README."""
    return (
        f"expressions up to {MAX_SOURCE_CHARS:,} characters, {MAX_STATEMENTS:,} statements, "
        f"{MAX_AST_NODES:,} nodes and {MAX_DEPTH:,} levels deep; tensors up to "
        f"{MAX_ELEMENTS:,} elements each and {MAX_TOTAL_ELEMENTS:,} in all, and {MAX_WORK:,} "
        f"elements times expression nodes; constants up to "
        f"{MAX_CONSTANT:g} in magnitude."
    )


#: Address space `import torch` takes (VmPeak, measured with torch 2.14.1 on Linux: 3.1 GiB;
#: under `ulimit -v` of 3 GiB it cannot load at all).
TORCH_ADDRESS_SPACE = 3_300_000_000


def address_space_limit() -> int | None:
    """Bytes of address space this process may map (`ulimit -v`, RLIMIT_AS), None when unlimited."""
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _cap() -> str:
    cap = address_space_limit()
    return "" if cap is None else f"; this process may use {cap / 1e9:.1f} GB of address space (ulimit -v {cap // 1024})"


def torch_unavailable(err: BaseException) -> LimitError:
    """The error for torch failing to load (its shared libraries cannot be mapped)."""
    cap = address_space_limit()
    hint = (f"torch alone needs about {TORCH_ADDRESS_SPACE / 1e9:.1f} GB of address space to load: raise ulimit -v"
            if cap is not None and cap < 2 * TORCH_ADDRESS_SPACE else "check the torch installation (python -c 'import torch')")
    return LimitError(f"torch could not be loaded ({str(err).strip() or type(err).__name__}){_cap()}", hint=hint)


def out_of_memory() -> LimitError:
    """The error for a MemoryError: the work did not fit the memory (or address space) there is."""
    return LimitError(f"the work ran out of memory{_cap()}",
                      hint="use fewer values (a smaller --var or --points), or raise the limit (ulimit -v)")


#: What torch's allocators raise when memory (or address space) runs out: a RuntimeError.
_ALLOCATION_FAILURES = ("DefaultCPUAllocator: can't allocate memory", "alloc_cpu.cpp", "out of memory")


def is_out_of_memory(err: BaseException) -> bool:
    """Whether `err` is an allocation that failed (MemoryError, or torch's RuntimeError for it)."""
    if isinstance(err, MemoryError):
        return True
    return isinstance(err, RuntimeError) and any(text in str(err) for text in _ALLOCATION_FAILURES)
