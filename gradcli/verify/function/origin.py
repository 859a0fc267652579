"""Where a nan in a Function's double backward first appears: the node and the user's line.

When double backward gives nan but first order is finite, no cause can be read off the
Jacobians (a saved intermediate is not it: diagnose.py asks for evidence), but the place
can be seen. Under anomaly mode torch records, for every node built while backward ran with
create_graph, the frames that built it, and stops at the first node that returns nan
(NOTES.md: "Function 'SqrtBackward0' returned nan values in its 0th output."), warning
with those frames. The last of them in the Function's own file is the line of backward
whose derivative produced the nan (`where(Y > 0, Y ** (2 - alpha), 0)` at Y = 0).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from ..finite_differences.jacobian import leaves

_NODE = re.compile(r"Function '(\w+)' returned nan values")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)\n\s+(?P<code>[^\n]*)')


def nan_origin(gradient: Callable[[dict[str, torch.Tensor]], torch.Tensor], tensors: dict[str, torch.Tensor],
               source: Path | None) -> str | None:
    """'PowBackward1, from backward at my_ops.py line 38: gppr = ...', or None when anomaly
    mode saw no nan (or not in `source`)."""
    fresh = leaves(tensors)
    with warnings.catch_warnings(record=True) as caught, torch.autograd.detect_anomaly():
        warnings.simplefilter("always")
        try:
            flat = gradient(fresh)
            if not flat.requires_grad:
                return None
            for i in range(flat.numel()):
                torch.autograd.grad(flat[i], list(fresh.values()), retain_graph=True, allow_unused=True)
        except RuntimeError as err:
            found = _NODE.search(str(err))
            if found:
                return _with_line(found.group(1), [str(w.message) for w in caught], source)
    return None


def _with_line(node: str, messages: list[str], source: Path | None) -> str:
    text = next((m for m in messages if m.startswith(f"Error detected in {node}")), "")
    frames = [f for f in _FRAME.finditer(text)
              if source is not None and Path(f.group("file")).resolve() == source.resolve()]
    if not frames:
        return node
    last: Any = frames[-1]
    return (f"{node}, built in {last.group('name')} at {Path(last.group('file')).name} line {last.group('line')}: "
            f"{last.group('code').strip()}")
