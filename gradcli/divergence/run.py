"""`gradcli diverge SCRIPT`: the script run under two setups side by side, judged step by step
against the band, and where and why the runs part: a library call that returns a
DivergeResult (the CLI renders it).

The runs: a and b, and the two that measure the band, the script as written in float32 and in
float64 (a run that is one of these already is not run twice). When the runs part in the
forward or the backward, they are run again to that step with every computing module
fingerprinted there (locate.py); those reruns are hooked from the first step, so a compiled
run is compiled with its hooks, which can change what dynamo captures: when the located runs
no longer part at that step, the report says so, and the recorded evidence names the cause.

A run that reaches a step `gradcli watch` would stop (a nan or inf in the loss or in a gradient
about to be applied) ends there; it is run again to that step under watch itself, and watch's
own stop record (the origin and cause its replay finds) is the report's (`stops`).
"""

from __future__ import annotations

import math

from ..watcher.script import Script, check_script
from .band import Band, narrower
from .causes import find_cause
from .cost import cost_of
from .judge import first_parting, judge
from .locate import Where, locate
from .result import DivergeResult, RunStop
from .runs import RunFailed, RunLog, launch
from .setups import RunSetup

FLOAT32, FLOAT64 = RunSetup("same"), RunSetup("float64")


def diverge(script: Script, a: RunSetup, b: RunSetup, *, steps: int | None = None) -> DivergeResult:
    check_script(script, "diverge")
    for option, setup in (("--a", a), ("--b", b)):
        setup.check_machine(option)
    setups, roles = _runs(a, b)
    logs = launch(script, setups, steps=steps)
    ra, rb, r32, r64 = (logs[k] for k in roles)
    band = Band(narrower(a.precision, b.precision))
    judged = judge(ra, rb, r32, r64, band)
    result = DivergeResult(script.name, a, b, band, judged, parted_at=first_parting(judged),
                           torch=(ra.torch, rb.torch), costs=(cost_of(ra), cost_of(rb)))
    result.stops = _stops(script, ra, rb)
    if _measured_by_itself(a, b):
        result.notes.append("float32 against float64: the band is measured by this pair itself, so only the data, "
                            "a non-finite value or a skipped step can part them")
    if any(s["batch"] != t["batch"] for s, t in zip(r32.steps, r64.steps)) and result.parted != "data":
        result.notes.append("the float32 and float64 runs that measure the band saw other batches: the band is not measured")
    parted = result.parted_at
    if parted is None:
        return result
    evident = find_cause(parted, ra, rb, None)
    sharded = a.ranks != b.ranks  # (a rank's activations are its shard's: no module to compare with one process's)
    if parted.phase in ("forward", "backward") and not sharded and (evident is None or evident.kind != "hook-after-compile"):
        # (a hook the compiled run never saw is evidence enough; hooking every module would recompile it)
        located = launch(script, setups, steps=parted.step, locate=parted.step)
        la, lb, l32, l64 = (located[k] for k in roles)
        result.located_phase, result.where = locate(parted, la, lb, l32, l64, band)
        again = judge(la, lb, l32, l64, band)
        if len(again) >= parted.step and again[parted.step - 1].phase is None:
            result.notes.append(f"with every module hooked (graph breaks at each under torch.compile) the runs agree at step "
                                f"{parted.step}: the hooks change what runs, so no module is located")
        ra, rb = _with_located(ra, la), _with_located(rb, lb)
    result.cause = find_cause(parted, ra, rb, result.where)
    _placed_by_cause(result, ra, rb)
    return result


def _stops(script: Script, a: RunLog, b: RunLog) -> list[RunStop]:
    """The runs that reached a step watch stops, each run again to that step under watch (side
    by side), with watch's own record of the stop."""
    stopped = [(side, log) for side, log in (("a", a), ("b", b)) if log.stop is not None]
    if not stopped:
        return []
    try:
        watched = launch(script, [log.setup for _, log in stopped], steps=max(log.stop["step"] for _, log in stopped),  # type: ignore[index]
                         watch=True)
    except RunFailed as err:
        watched = [RunLog(log.setup, error=str(err)) for _, log in stopped]
    return [_run_stop(side, log, again) for (side, log), again in zip(stopped, watched)]


def _run_stop(side: str, log: RunLog, again: RunLog) -> RunStop:
    from ..watcher.names import module_of
    from ..watcher.result import Replay, Stop

    recorded = log.stop or {}
    record = again.watch
    if record is not None and record["stop"]["step"] == recorded["step"]:
        stop = Stop.from_fields(record["stop"])
        return RunStop(side, log.setup, stop, record["checks"], record["skipped"], list(record["notes"]))  # type: ignore[arg-type]
    # watch's rerun did not stop at that step (the script does not compute the same steps again,
    # or the rerun failed): the recorder's own finding, in watch's record, without an origin
    bad = list(recorded.get("parameters", []))
    loss = recorded.get("loss")
    why = again.error or (f"run again under gradcli watch, the script stopped at step {record['stop']['step']}" if record
                          else "run again under gradcli watch, the step was finite: the script does not compute the same steps again")
    kind = "nonfinite_gradient" if loss is None or math.isfinite(loss) else "nonfinite_loss"
    stop = Stop(recorded["step"], kind, recorded.get("optimizer", ""), bad, module_of(bad[0]) if bad else None, loss,
                replay=Replay("not_replayed", why_not=why))
    return RunStop(side, log.setup, stop, len(log.steps) + 1, sum(bool(s["skipped"]) for s in log.steps))  # type: ignore[arg-type]


def _placed_by_cause(result: DivergeResult, a: RunLog, b: RunLog) -> None:
    """Where the evidence itself points: the operation that made a nan or inf (its line, in
    place of the module's call), the module a late hook was put on, the BatchNorm each rank ran."""
    cause = result.cause
    if cause is None:
        return
    d = cause.detail
    if cause.kind == "overflow" and d.get("call"):
        result.node = d["call"]
        if result.where is None or result.where.module == d["module"]:
            bands = result.where.bands if result.where else float("nan")
            result.where = Where(d["module"] or "", d["module_class"] or "", bands, d["file"], d["line"], d["code"])
    elif cause.kind == "hook-after-compile" and result.where is None:
        result.where = _module_seen(d["module"], a, b)
    elif cause.kind == "batchnorm-per-rank" and result.where is None:
        result.where = Where(d["modules"][0], d["module_class"], float("nan"), None, None, None)


def _module_seen(path: str, *logs: RunLog) -> Where | None:
    """The module the evidence named (a hook registered after compiling), with the hook's line."""
    for log in logs:
        for step in log.steps:
            for h in step.get("hooked", []):
                if h["path"] == path:
                    return Where(path, h["cls"], float("nan"), h["file"], h["line"], h["code"])
    return None


def _runs(a: RunSetup, b: RunSetup) -> tuple[list[RunSetup], tuple[int, int, int, int]]:
    """The setups to launch, and where a, b, float32 and float64 are among them."""
    setups = [a, b]
    float32 = 0 if a == FLOAT32 else (1 if b == FLOAT32 else None)
    float64 = 0 if a == FLOAT64 else (1 if b == FLOAT64 else None)
    if float32 is None:
        setups.append(FLOAT32)
        float32 = len(setups) - 1
    if float64 is None:
        setups.append(FLOAT64)
        float64 = len(setups) - 1
    return setups, (0, 1, float32, float64)


def _measured_by_itself(a: RunSetup, b: RunSetup) -> bool:
    return {a, b} == {FLOAT32, FLOAT64}


def _with_located(log: RunLog, located: RunLog) -> RunLog:
    log.modules, log.draws, log.nonfinite = located.modules, located.draws, located.nonfinite
    return log
