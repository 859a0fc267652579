"""DOT text to a picture (.svg, .png, .pdf) through Graphviz's `dot` program.

gradcli writes DOT itself (render/dot.py) and never needs Graphviz for that; only turning
it into an image does. `dot` is a separate program (not a Python package), so it is looked
up on PATH when a picture is asked for, and its absence is a usage error whose hint says
how to install it or how to get the DOT text instead.

dot's layout time grows faster than linearly with the graph (measured here: 2,000 DOT
nodes 1.4 s, 4,000 nodes 6 s, 20,000 nodes over 8 minutes), so graphs beyond
MAX_RENDER_NODES are refused before dot starts, with the same way out: write DOT text.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from ..errors import LimitError, UsageError

#: File suffix -> dot's output format.
FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf"}
#: Suffixes that mean "write the DOT text itself".
TEXT_SUFFIXES = (".dot", ".gv")
#: Pictures gradcli does not draw: DOT text written under these names would pose as an image.
OTHER_PICTURES = (".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff", ".eps", ".ps")
#: Most DOT nodes handed to `dot` (about 6 s of layout at this size).
MAX_RENDER_NODES = 4000
#: Seconds dot may take before gradcli gives up (a safety net; the node limit comes first).
DOT_TIMEOUT = 300

INSTALL_HINT = (
    "install Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; "
    "conda: conda install graphviz), or write the DOT text with --dot graph.dot and render it elsewhere"
)

# A node statement: `  n3 [label=...];` (edges have `->` before the bracket).
_NODE = re.compile(r"^\s*[A-Za-z_][\w]*\s*\[", re.MULTILINE)


def is_picture(path: str | Path) -> bool:
    """Whether `path` asks for a rendered picture (.svg/.png/.pdf) rather than DOT text."""
    return Path(path).suffix.lower() in FORMATS


def refuse_other_pictures(path: str | Path) -> None:
    """A UsageError for a picture suffix gradcli does not draw (`--dot graph.jpg`)."""
    suffix = Path(path).suffix.lower()
    if suffix in OTHER_PICTURES:
        raise UsageError(f"gradcli draws .svg, .png or .pdf, not {suffix} ('{path}')",
                         hint="use one of those, or .dot for the DOT text")


def picture_format(path: str | Path) -> str:
    """dot's -T format for `path`; a UsageError for a suffix that is neither a picture nor DOT."""
    suffix = Path(path).suffix.lower()
    if suffix in FORMATS:
        return FORMATS[suffix]
    known = ", ".join([*FORMATS, *TEXT_SUFFIXES])
    raise UsageError(
        f"cannot tell what to write to '{path}' from its suffix {suffix or '(none)'!r}",
        hint=f"use one of {known} ('-' prints DOT text)",
    )


def dot_program() -> str:
    """The path of Graphviz's `dot`; a UsageError with an install hint when it is missing."""
    found = shutil.which("dot")
    if found is None:
        raise UsageError("Graphviz's `dot` program is not installed (it renders .svg/.png/.pdf)", hint=INSTALL_HINT)
    return found


def count_nodes(dot_text: str) -> int:
    """Node statements in DOT text written by gradcli (one per line)."""
    return len(_NODE.findall(dot_text))


def render(dot_text: str, path: str | Path) -> Path:
    """Render `dot_text` to `path`, in the format its suffix names; returns the path."""
    path = Path(path)
    fmt = picture_format(path)
    nodes = count_nodes(dot_text)
    if nodes > MAX_RENDER_NODES:
        raise LimitError(
            f"the graph has {nodes:,} DOT nodes; Graphviz lays out at most {MAX_RENDER_NODES:,} "
            "in reasonable time",
            hint=f"write the DOT text instead (--dot {path.with_suffix('.dot')}) and render parts of it",
        )
    program = dot_program()
    try:
        finished = subprocess.run(
            [program, f"-T{fmt}", "-o", str(path)],
            input=dot_text.encode("utf-8"), capture_output=True, timeout=DOT_TIMEOUT, check=False,
        )
    except subprocess.TimeoutExpired:
        raise LimitError(
            f"Graphviz's dot did not finish within {DOT_TIMEOUT} s", hint=f"write the DOT text instead: --dot {path.with_suffix('.dot')}"
        ) from None
    except OSError as err:
        raise UsageError(f"could not run Graphviz's dot ({program}): {err.strerror or err}", hint=INSTALL_HINT) from None
    if finished.returncode != 0:
        message = finished.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = message[0] if message else f"exit status {finished.returncode}"
        raise UsageError(f"Graphviz's dot could not write '{path}': {reason}")
    return path
