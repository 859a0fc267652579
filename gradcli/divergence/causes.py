"""Why the runs part, from what the runs recorded, never from a setup's name alone:

- batches-differ: the batches' hashes differ (the script draws its data from a generator it
  does not seed: an augmentation, a shuffle, a DataLoader worker's random state);
- hook-after-compile: one run is compiled, and a forward hook appeared on a module after the
  first step (when the model was compiled): dynamo does not guard module hooks
  (`skip_nnmodule_hook_guards`), so the compiled model never runs it;
- overflow: a module's output is non-finite in one run only (float16's largest is 65504);
- random-ops: the model's forward drew random numbers at the parted step, and one run is
  compiled: a compiler may draw its own (inductor does; aot_eager draws as eager does);
- loss-scale-skip: one run skipped the step on a non-finite scaled gradient, the other did not.
"""

from __future__ import annotations

from typing import Any

from .judge import StepJudged
from .locate import Where
from .result import Cause
from .runs import RunLog


def find_cause(parted: StepJudged, a: RunLog, b: RunLog, where: Where | None) -> Cause | None:
    phase = parted.phase
    if phase == "data":
        return Cause("batches-differ", {"step": parted.step, "same_setup": a.setup == b.setup})
    if parted.skipped[0] != parted.skipped[1]:
        return Cause("loss-scale-skip", {"run": "a" if parted.skipped[0] else "b", "step": parted.step})
    born = [(side, log) for side, log in (("a", a), ("b", b)) if log.nonfinite is not None]
    if len(born) == 1:  # a nan or inf born in one run's forward only
        side, log = born[0]
        n = log.nonfinite or {}
        return Cause("overflow", {"module": n["module"], "module_class": n["module_class"], "call": n["call"], "kind": n["kind"], "dtype": n["dtype"],
                                  "run": side, "setup": log.setup.text, "file": n["file"], "line": n["line"], "code": n["code"]})
    if where is not None and where.nonfinite is not None:
        run = a if where.nonfinite == "a" else b
        return Cause("overflow", {"module": where.module, "module_class": where.module_class, "call": None, "kind": "inf or nan", "dtype": run.setup.precision,
                                  "run": where.nonfinite, "setup": run.setup.text, "file": where.file, "line": where.line,
                                  "code": where.code})
    if a.setup.ranks != b.setup.ranks:
        return _ranks(parted, a, b)
    compiled = [log for log in (a, b) if log.setup.kind == "compile"]
    eager = [log for log in (a, b) if log.setup.kind != "compile"]
    if compiled and eager:
        hooked = hooked_later(eager[0], parted.step)
        if hooked is not None:
            module, step = hooked
            return Cause("hook-after-compile", {"module": module["path"], "registered_at": step,
                                                "hook": {k: module[k] for k in ("file", "line", "code")},
                                                "compiled": compiled[0].setup.text})
        draws = [log.draws for log in (a, b) if log.draws is not None]
        if any(draws):
            dropout = [m["path"] for m in a.modules or [] if "Dropout" in m["cls"]]
            return Cause("random-ops", {"modules": dropout, "compiled": compiled[0].setup.text})
    return None


def _ranks(parted: StepJudged, a: RunLog, b: RunLog) -> Cause | None:
    """One process against N: BatchNorm layers each rank runs on its own shard, or gradients
    that are all N times (or 1/N) the one process's (a loss scaled by the world size, when DDP
    already averages)."""
    many = b if b.setup.ranks > a.setup.ranks else a
    one = a if many is b else b
    norms = many.steps[0].get("batchnorm", []) if many.steps else []
    if norms and parted.step == 1:
        return Cause("batchnorm-per-rank", {"modules": [n["path"] for n in norms], "module_class": norms[0]["cls"],
                                            "ranks": many.setup.ranks})
    k = parted.step - 1
    if k < len(one.steps) and k < len(many.steps):
        g1, gn = one.steps[k]["grads"], many.steps[k]["grads"]
        ratios = [gn[n][0] / g1[n][0] for n in g1 if n in gn and g1[n][0]]
        if ratios and max(ratios) - min(ratios) < 0.01 * max(ratios) and abs(ratios[0] - 1) > 0.01:
            return Cause("gradients-scaled", {"ratio": ratios[0], "ranks": many.setup.ranks})
    return None


def hooked_later(log: RunLog, until: int) -> tuple[dict[str, Any], int] | None:
    """The first module that got a forward hook after the first step (its path, class and the
    hook's line), and the step it was seen at."""
    first = {h["path"] for h in log.steps[0].get("hooked", [])} if log.steps else set()
    for step in log.steps[1:until]:
        new = [h for h in step.get("hooked", []) if h["path"] not in first]
        if new:
            return new[0], step["step"]
    return None
