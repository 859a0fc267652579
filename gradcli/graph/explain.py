"""Plain explanations of the errors autograd raises during a traced pass.

torch's messages are exact but terse. The trace keeps the message as torch wrote it and adds
one plain sentence on why it happened and, where one exists, the gradcli flag that fixes it.
The patterns are the fixed texts checked in NOTES.md (torch 2.14).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path

from ..targets.base import PassError  # defined below the graph: a target's explainer returns one too




# (substring of torch's message, explanation, the flag that fixes it)
_KNOWN = (
    (
        "backward through the graph a second time",
        "The previous pass freed the tensors the graph saved for backward (autograd does this "
        "unless told to retain the graph), so the graph cannot be run again.",
        "--retain-graph",
    ),
    (
        "appears to not have been used in the graph",
        "A --wrt variable does not reach the output, so autograd.grad has no gradient to give it.",
        "drop that name from --wrt",
    ),
    (
        "does not require grad and does not have a grad_fn",
        "The tensor being differentiated has no graph behind it (it does not depend on a variable "
        "that requires grad, or its graph was not built because create_graph was off).",
        "--create-graph",
    ),
    (
        "grad can be implicitly created only for scalar outputs",
        "backward() needs a starting gradient for a non-scalar output.",
        "--grad-output ones",
    ),
    (
        "Mismatch in shape",
        "The starting gradient must have exactly the output's shape.",
        "--grad-output ones",
    ),
)


def explain(error: BaseException) -> PassError:
    """A PassError for an exception raised by torch.autograd.backward / grad."""
    message = str(error).strip()
    for pattern, explanation, fix in _KNOWN:
        if pattern in message:
            return PassError(type(error).__name__, message, explanation, fix)
    frame = _user_frame(error)
    if frame is not None:  # a custom Function's backward, or a hook: the user's own line
        return PassError(type(error).__name__, message,
                         f"your code raised this while autograd ran it, at {Path(frame.filename).name} line "
                         f"{frame.lineno}: {(frame.line or '').strip()}", None)
    return PassError(
        type(error).__name__, message, "autograd raised this error while running the pass.", None
    )


def _user_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the traceback that is neither torch's, gradcli's nor Python's
    own; one outside the installed packages first (numpy called from a backward is not the
    line to show), else an installed package's (a Function from a package the user installed)."""
    import sysconfig

    import torch

    paths = sysconfig.get_paths()
    theirs = [Path(torch.__file__).resolve().parent, Path(__file__).resolve().parent.parent,
              Path(paths["stdlib"]).resolve()]
    installed = [Path(paths["purelib"]).resolve(), Path(paths["platlib"]).resolve()]

    def inside(frame: traceback.FrameSummary, roots: list[Path]) -> bool:
        return any(Path(frame.filename).resolve().is_relative_to(root) for root in roots)

    candidates = [f for f in traceback.extract_tb(error.__traceback__) if not inside(f, theirs)]
    own = [f for f in candidates if not inside(f, installed)]
    return (own or candidates or [None])[-1]


def nonleaf_note(name: str) -> str:
    """Why an intermediate's .grad is None, and how to keep it."""
    return (
        f"{name} is an intermediate, not a leaf: autograd writes .grad only for leaves, "
        f"so {name}.grad is None; --retain-grad {name} keeps it"
    )
