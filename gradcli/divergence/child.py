"""One run of `gradcli diverge`, in its own process:

    python -m gradcli.divergence.child SPEC.json

SPEC holds the script (path or module, and its arguments), the setup, --steps, the step to
locate at (or null) and the path of the JSON-lines file to write (recorder.py). The script's
own output goes where the parent sent this process's stdout and stderr. The last line of
the file says how the run ended: finished, stopped at its last step, or the script's error.

With `watch` in the spec, `gradcli watch` runs inside the setup too (its hooks after the
recorder's, so it sees what the setup computes): when it stops the run, its own stop record
(watcher/result.py's Stop, origin and cause found by its replay) is one `watch` line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    from ..watcher.script import Script, run_script
    from .recorder import Enough, Recorder
    from .setups import RunSetup

    script = Script(spec["path"], spec["module"], tuple(spec["args"]))
    setup = RunSetup(spec["setup"]["kind"], spec["setup"]["backend"], spec["setup"]["half"], spec["setup"]["ranks"])
    error = None
    rank = int(os.environ.get("RANK", "0") or 0)  # under torchrun: rank 0 writes the run's file
    path = spec["out"] if rank == 0 else f"{spec['out']}.rank{rank}"
    watched = bool(spec.get("watch"))
    with open(path, "w", encoding="utf-8") as out:
        try:
            with Recorder(setup, out, steps=spec["steps"], locate=spec["locate"], watched=watched):
                if watched:
                    _run_watched(script, out)
                else:
                    run_script(script)
        except Enough:
            pass
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                error = f"the script exited with status {exit_.code}"
        except BaseException as err:  # noqa: BLE001 - the script's own error, reported by the parent
            import traceback

            traceback.print_exc()
            error = f"{type(err).__name__}: {err}"
        out.write(json.dumps({"kind": "end", "error": error}) + "\n")
    return 0


def _run_watched(script: object, out: object) -> None:
    import dataclasses

    from ..watcher.result import WatchStop
    from ..watcher.script import run_script
    from ..watcher.session import Watch

    with Watch(script=script) as watch:
        try:
            run_script(script)  # type: ignore[arg-type]
        except WatchStop:
            pass  # the stop is in watch.result, read below
    result = watch.result
    if result.stop is not None:
        record = {"kind": "watch", "stop": dataclasses.asdict(result.stop), "checks": result.checks,
                  "skipped": result.skipped, "notes": list(result.notes)}
        out.write(json.dumps(record) + "\n")  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
