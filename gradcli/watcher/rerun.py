"""Where the first nan or inf was born when it was in the loss: the script rerun to the step.

Code outside the model's modules (a hand-written loss) cannot be replayed in process: it is
the user's Python, run once. A script that seeds its random numbers computes the same steps
again, so gradcli runs it once more in a child process (`python -m gradcli.watcher.rerun
SPEC`) with the same hooks, and arms the recorders when the stopped step begins: targets/
record.py's recorder tags every node with its module and the user's line, and graph/
evidence.py's call log keeps what verify/causes' node reasoning reads. Backward keeps its
graph for that one step; at the optimizer's step pre-hook the step is analysed, written to a
JSON file, and the child ends. The child's stdout and stderr are not shown (the script has
printed them once already); the cost is the steps before it, measured and reported.

When the rerun's step is finite, the script is not deterministic: the report says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from .causes import backward_cause, forward_cause, function_origin, origin_from
from .options import WatchOptions
from .result import Replay, Stop, WatchCause, WatchOrigin
from .script import Script, run_script
from .session import Watch


def rerun(script: Script, stop: Stop) -> None:
    """Fill `stop.origin`/`stop.cause` by rerunning `script` to `stop.step` (in a child)."""
    with tempfile.TemporaryDirectory(prefix="gradcli-rerun-") as folder:
        spec, out = Path(folder) / "spec.json", Path(folder) / "out.json"
        spec.write_text(json.dumps({"path": script.path, "module": script.module, "args": list(script.args),
                                    "optimizer": stop.optimizer, "step": stop.step, "out": str(out)}))
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "gradcli.watcher.rerun", str(spec)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=_env(), check=False)
        seconds = time.perf_counter() - started
        if not out.exists():
            stop.replay = Replay("reran", seconds, stop.step - 1, why_not=(
                "the rerun of the script did not reach the step: " + _last_line(done.stderr)))
            return
        found = json.loads(out.read_text())
    stop.replay = Replay("reran", seconds, stop.step - 1, why_not=found.get("why_not"))
    if found.get("origin"):
        stop.origin = WatchOrigin(**found["origin"])
    if found.get("cause"):
        stop.cause = WatchCause(**found["cause"])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _last_line(stderr: bytes) -> str:
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "it ended without a word"


class _Done(BaseException):
    """Ends the rerun once the step is analysed (BaseException: a script's `except Exception`
    must not swallow it)."""


class Armed(Watch):
    """A Watch that arms the recorders when step `step` of optimizer `label` begins."""

    def __init__(self, label: str, step: int, out: Path) -> None:
        super().__init__(WatchOptions(replay=False))
        self.target, self.target_step, self.out = label, step, out
        self.recorder: Any = None
        self.log: Any = None
        self.armed = False

    def __enter__(self) -> "Armed":
        super().__enter__()
        if self.target_step == 1:
            self._arm()
        return self

    def close(self) -> None:
        self._disarm()
        super().close()

    def _arm(self) -> None:
        from ..graph.evidence import CallLog
        from ..targets.record import ForwardRecorder, watching

        self.recorder = ForwardRecorder(self.names.modules, watch_nonfinite=True)
        self.log = CallLog()
        self._log_mode = watching(self.log)
        # The recorder's mode innermost: it looks for the user's line from its own frame up,
        # and an outer mode's frames (gradcli's) between the two would stop that walk.
        self._log_mode.__enter__()
        self.recorder.__enter__()
        self.armed = True

    def _disarm(self) -> None:
        if self.armed:
            self.armed = False
            self.recorder.__exit__(None, None, None)
            self._log_mode.__exit__(None, None, None)

    def _on_backward(self, tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if self.armed:  # keep the graph until the step's pre-hook reads it
            if len(args) >= 2:  # Tensor.backward passes (gradient, retain_graph, create_graph)
                args = (args[0], True, *args[2:])
            else:
                kwargs["retain_graph"] = True
        return super()._on_backward(tensors, *args, **kwargs)

    def _post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        super()._post_step(optimizer, args, kwargs)
        watched = self.watched.get(id(optimizer))
        if watched is not None and watched.label == self.target and watched.steps == self.target_step - 1:
            self._arm()

    def _check(self, optimizer: Any, watched: Any) -> None:
        if not (self.armed and watched.label == self.target and watched.steps == self.target_step):
            return
        self._disarm()
        params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
        found = self._analyse(dict(zip(self.names.parameters(params), params)))
        self.out.write_text(json.dumps(found))
        raise _Done

    def _analyse(self, params: dict[str, torch.Tensor]) -> dict[str, Any]:
        from ..graph.evidence import gather_recorded
        from ..targets.record import origin_of
        from ..verify.causes.nodes import NodeReasoning

        event = self.recorder.recording.nonfinite
        for root in self.losses:
            if not isinstance(root, torch.Tensor) or root.grad_fn is None:
                continue
            finite_loss = bool(torch.isfinite(root.detach()).all())
            if not finite_loss and event is not None:
                origin = origin_from("forward", event.call, event.origin)
                return _found(origin, forward_cause(event, origin))
            evidence = gather_recorded(self.log, root.sum(), params)
            if all(g is None or bool(torch.isfinite(g).all()) for g in evidence.gradients.values()):
                continue
            reasoning = NodeReasoning(evidence, None, "")
            node = reasoning.origin()
            if node is None:
                continue
            try:
                reasoned = reasoning.nonfinite()
            except Exception:  # noqa: BLE001 - the reasoning is best effort; the origin stands
                reasoned = None
            origin = function_origin(node.node) or origin_from("backward", node.name, origin_of(node.node))
            return _found(origin, backward_cause(node.node, reasoned))
        return {"why_not": "the rerun's step was finite: the script does not compute the same steps again "
                           "(seed its random numbers to rerun it)"}


def _found(origin: WatchOrigin, cause: WatchCause) -> dict[str, Any]:
    return {"origin": {"phase": origin.phase, "node": origin.node, "module": origin.module,
                       "module_class": origin.module_class, "file": origin.file, "line": origin.line,
                       "code": origin.code},
            "cause": {"kind": cause.kind, "summary": cause.summary}}


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    script = Script(spec["path"], spec["module"], tuple(spec["args"]))
    with Armed(spec["optimizer"], spec["step"], Path(spec["out"])):
        try:
            run_script(script)
        except _Done:
            return


if __name__ == "__main__":
    main(sys.argv[1])
