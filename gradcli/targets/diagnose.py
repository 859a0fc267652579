"""The autograd errors of real model code, explained with the lines that caused them.

torch says *what* failed; what the user needs is *where* in their code. The forward
recording (record.py) and the walked graph hold the answer:

- a tensor saved for backward and modified in place later: the node that saved it (the walk
  could not read that saved value back), the line that made that node, and the in-place call
  that bumped its version;
- an output without grad_fn: the recorded calls that cut the graph (detach, `.data`,
  `.item()`, no_grad, an integer result);
- a non-scalar output with no --loss: the output's shape and the options that reduce it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from .base import Origin, PassError
from .record import Recording

_INPLACE = re.compile(
    r"\[torch\.(?:\w+\.)?(?P<type>\w+) \[(?P<shape>[\d, ]*)\]\], which is (?:output (?P<index>\d+) of (?P<node>\w+)|a leaf \w+)"
    r"(?:.*?), is at version (?P<version>\d+); expected version (?P<expected>\d+)",
    re.S,
)


def where(origin: Origin | None) -> str:
    """`model.py:42 (encoder.fc1 (Linear))  h = self.fc1(x)` in one line."""
    if origin is None:
        return "an unknown line"
    parts = []
    if origin.file is not None:
        parts.append(f"{_short(origin.file)}:{origin.line}")
    if origin.module_class is not None:
        parts.append(f"in {origin.module} ({origin.module_class})" if origin.module else f"in {origin.module_class}")
    text = " ".join(parts) or "an unknown line"
    return f"{text}: {origin.code}" if origin.code else text


def _short(file: str) -> str:
    return file.rsplit("/", 1)[-1]


class CodeExplainer:
    """Explains a pass's error with the recording of the forward that built the graph."""

    def __init__(self, recording: Recording, output_shape: list[int], outputs: list[str]) -> None:
        self.recording = recording
        self.output_shape = output_shape
        self.outputs = outputs

    def __call__(self, error: PassError, graph: Any) -> PassError:
        message = error.message
        if "modified by an inplace operation" in message:
            return self._inplace(error, graph)
        if "does not require grad and does not have a grad_fn" in message:
            return self._cut(error)
        if "grad can be implicitly created only for scalar outputs" in message:
            example = f"{self.outputs[0]}.sum()" if self.outputs else "out.sum()"
            return replace(
                error,
                explanation=f"The output has shape {self.output_shape}, not a scalar: backward() needs a starting "
                "gradient, or a loss that reduces the output to one number.",
                fix=f"--loss 'cross_entropy(out, labels)' (or --loss '{example}', --grad-output ones)",
            )
        return error

    def _inplace(self, error: PassError, graph: Any) -> PassError:
        match = _INPLACE.search(error.message)
        shape = [int(d) for d in match["shape"].split(",") if d.strip()] if match else None
        made_by = match["node"] if match and match["node"] else None
        version = int(match["version"]) if match else None
        savers = [
            node for node in graph.nodes
            if any(isinstance(v, dict) and "modified" in v for v in node.saved.values())
        ]
        saver = savers[0] if savers else None
        modifier = self._modifier(made_by, shape, version)
        details: dict[str, Any] = {
            "shape": shape, "version": version, "expected_version": int(match["expected"]) if match else None,
            "made_by": made_by, "saved_by": saver.id if saver else None,
            "saved_by_name": saver.name if saver else None,
            "saved_at": _origin_data(saver.origin if saver else None),
            "modified_at": _origin_data(modifier.origin if modifier else None),
            "modified_by": modifier.call if modifier else None,
        }
        what = f"A tensor of shape {shape}" + (f" (the output of {made_by})" if made_by else "")
        text = [f"{what} was saved for backward"]
        if saver is not None:
            text.append(f" by {saver.id} {saver.name}, created at {where(saver.origin)},")
        if modifier is not None:
            text.append(f" then modified in place by {modifier.call}() at {where(modifier.origin)}")
        else:
            text.append(" then modified in place")
        text.append(f" (it is at version {version}; backward needs version {details['expected_version']}).")
        return replace(
            error, explanation="".join(text),
            fix="make that operation out of place (y = y * 2 instead of y *= 2 or y.mul_(2)), or .clone() the tensor before changing it",
            details=details,
        )

    def _modifier(self, made_by: str | None, shape: list[int] | None, version: int | None) -> Any:
        candidates = [e for e in self.recording.inplace if e.detail.get("shape") == shape]
        if made_by is not None:
            # torch names the node by its forward name (Sigmoid), the graph by SigmoidBackward0.
            named = [e for e in candidates if (e.detail.get("node") or "").startswith(made_by)]
            candidates = named or candidates
        exact = [e for e in candidates if e.detail.get("version") == version]
        chosen = exact or candidates
        return chosen[-1] if chosen else None

    def _cut(self, error: PassError) -> PassError:
        cuts = self.recording.cuts
        if not cuts:
            return replace(
                error,
                explanation="The output has no grad_fn: nothing that requires grad reaches it (are the parameters "
                "frozen with requires_grad=False, or the inputs data only?).",
                fix="let a parameter or an input require grad (--wrt INPUT for an input)",
            )
        # Calls made to leave the graph (.item(), detach, no_grad) explain a cut output better
        # than an integer result (argmax), which is often a mask or an index used on the side.
        strong = [cut for cut in cuts if "integer" not in cut.detail["how"]]
        shown = (strong or cuts)[-3:]
        last = shown[-1]
        lines = "; ".join(f"{cut.detail['how']} at {where(cut.origin)}" for cut in shown)
        return replace(
            error,
            explanation=f"The output has no grad_fn: the graph was cut by {lines}. What follows a cut is computed "
            "from values autograd cannot follow back.",
            fix=_CUT_FIXES.get(last.detail["how"].split(" ")[0].rstrip("()"), "keep the computation in tensors that require grad"),
            details={"cuts": [{"how": c.detail["how"], "call": c.call, "at": _origin_data(c.origin)} for c in cuts]},
        )


_CUT_FIXES = {
    "detach": "remove the .detach() (or detach only what should not be trained)",
    ".data": "use the tensor itself instead of .data",
    "torch.no_grad": "run this part outside torch.no_grad()",
    "item": "keep the value a tensor: .item(), .tolist() and numpy() leave autograd",
    "tolist": "keep the value a tensor: .item(), .tolist() and numpy() leave autograd",
}


def _origin_data(origin: Origin | None) -> dict[str, Any] | None:
    if origin is None:
        return None
    return {"module": origin.module, "module_class": origin.module_class, "file": origin.file, "line": origin.line, "code": origin.code}
