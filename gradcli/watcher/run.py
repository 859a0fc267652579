"""A script watched from start to end: what `gradcli watch train.py ARGS` does, as a library
call that returns a WatchResult (the CLI renders it)."""

from __future__ import annotations

from ..errors import UserCodeError
from ..targets.load import user_error
from .options import WatchOptions
from .result import WatchResult, WatchStop
from .script import Script, check_script, run_script
from .session import Listener, Watch


class ScriptFailed(UserCodeError):
    """The script raised an exception of its own (not a stop): its traceback, without gradcli's frames."""


def watch_script(script: Script, options: WatchOptions, listener: Listener | None = None) -> WatchResult:
    check_script(script)
    watch = Watch(options, listener=listener, script=script)
    with watch:
        try:
            run_script(script)
            watch.result.finished = True
        except WatchStop:
            pass
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                raise ScriptFailed(f"the script exited with status {exit_.code}") from None
            watch.result.finished = True
        except Exception as err:  # noqa: BLE001 - the user's own exception, shown as theirs
            raise ScriptFailed(str(user_error("the script raised", err))) from None
    stop = watch.result.stop
    if stop is not None and options.replay and stop.kind != "spike" and stop.origin is None and stop.ranks is None:
        # (under torchrun a rerun would start a rank of its own, waiting for peers that never come)
        from .rerun import rerun

        rerun(script, stop)
    return watch.result
