"""Why a computation's gradient is not finite, at node level, for any code that calls torch.

An expression's causes (verify/causes/at_points.py) are found per group of points, against the exact
derivative. A user's model has no exact derivative to compare with, but its non-finite
gradients have the same mechanisms, and the same reasoning over graph nodes
(verify/causes/nodes.py) names them on whole tensors: leaked branch, overflow, 0·inf and
inf - inf. Forward runs under anomaly mode, so every node remembers the user's source line
that created it (the last frame of its traceback outside torch and gradcli).
"""

from __future__ import annotations

import os
import threading  # only its location: the stdlib's frames are not the user's
from typing import Any, Callable, Mapping

import torch

from ...graph.evidence import gather
from ...targets.load import is_user_file
from .cause import Cause
from .nodes import NodeReasoning

_SKIPPED = (os.path.dirname(threading.__file__),)  # torch's and gradcli's: not is_user_file


def explain_nonfinite(
    run: Callable[[], Any], inputs: Mapping[str, torch.Tensor] | None, *, source: str = "",
    origin_of: Callable[[Any], str | None] | None = None,
) -> Cause | None:
    """Run `run()` (computing a loss from `inputs`, tensors or parameters that require grad),
    backward from it with a gradient of ones, and name why some gradient is nan or inf; None
    when all are finite. `source` is the expression text that node spans point into. With
    `inputs` None, `run()` returns (loss, inputs) (a target that builds its own leaves);
    `origin_of(grad_fn)`, when given, names a node's source line instead of anomaly mode."""
    evidence = _gathered(run, inputs, origin_of)
    bad = {name: g for name, g in evidence.gradients.items() if g is not None and not bool(torch.isfinite(g).all())}
    if not bad:
        return None
    cause = NodeReasoning(evidence, None, source).nonfinite()
    cause.derivative = ", ".join(bad)
    cause.points = sum(int((~torch.isfinite(g)).sum()) for g in bad.values())
    if cause.kind == "masked_row":
        from .masked_rows import fixes_sentence, try_fixes

        cause.summary += "; " + fixes_sentence(try_fixes(lambda: _finite_run(run, inputs)))
    return cause


def _finite_run(run: Callable[[], Any], inputs: Mapping[str, torch.Tensor] | None) -> bool:
    """Forward and backward once more (a fix's torch-function mode around it): is the loss
    finite, and every gradient?"""
    if inputs is None:
        loss, leaves = run()
    else:
        loss, leaves = run(), dict(inputs)
    loss = torch.as_tensor(loss)
    if not bool(torch.isfinite(loss.detach()).all()):
        return False
    wanted = [t for t in leaves.values() if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(loss.sum(), wanted, allow_unused=True)
    return all(g is None or bool(torch.isfinite(g).all()) for g in grads)


def explain_cancellation(
    run: Callable[[], Any], inputs: Mapping[str, torch.Tensor] | None, *, source: str = "",
    origin_of: Callable[[Any], str | None] | None = None,
) -> Cause | None:
    """As `explain_nonfinite`, for a computation whose gradients are all finite: the node and
    line where a gradient loses its digits to cancellation, shown against its exact value
    (verify/causes/cancellation.py); None when no gradient is shown to be wrong."""
    from .cancellation import find_cancellation

    try:
        evidence = _gathered(run, inputs, origin_of)
    except RuntimeError:  # backward itself fails (an in-place change): trace reports that, not this
        return None
    if any(g is not None and not bool(torch.isfinite(g).all()) for g in evidence.gradients.values()):
        return None  # not finite: explain_nonfinite's question
    cause = find_cancellation(evidence, source)
    if cause is None:
        return None
    cause.derivative = ", ".join(name for name, g in evidence.gradients.items() if g is not None)
    return cause


def _gathered(run: Callable[[], Any], inputs: Mapping[str, torch.Tensor] | None,
              origin_of: Callable[[Any], str | None] | None) -> Any:
    """The evidence of one run, under anomaly mode so that each node knows its user's line."""
    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        evidence = gather(run, dict(inputs) if inputs is not None else None)
    for node in evidence.nodes:
        if node.span is None:  # an expression's nodes carry their span; a user's, a source line
            known = origin_of(node.node) if origin_of is not None else None
            node.span = known or user_line(node.node.metadata.get("traceback_"))
    return evidence


def user_line(frames: Any) -> str | None:
    """`file.py:12: code` of the innermost frame of an anomaly-mode traceback that is the
    user's (outside torch and gradcli)."""
    if not frames:
        return None
    for frame in reversed(frames):
        lines = frame.strip().splitlines()
        head = lines[0] if lines else ""
        if not head.startswith("File "):
            continue
        path = head.split('"')[1] if '"' in head else ""
        if not is_user_file(path) or any(path.startswith(skip) for skip in _SKIPPED):
            continue
        number = head.split("line ")[1].split(",")[0] if "line " in head else "?"
        code = lines[1].strip() if len(lines) > 1 else ""
        return f"{os.path.basename(path)}:{number}: {code}"
    return None
