"""Where a trainer callback's result is shown: on stderr, as the text `gradcli watch` prints.

The house rule is that only gradcli/cli/ prints, because a command owns its terminal. A
callback has no command around it: it runs inside the user's `trainer.fit()` under plain
`python`, and the only place its user looks is the terminal, where the trainer's own
traceback would otherwise be all there is. So this one function, beside the callbacks (the
public API's floor, above the renderers), writes the renderer's plain text to stderr: the
stop's report before the `WatchStop` leaves the fit, or the findings once at the fit's end.
Under `gradcli watch` (or inside `with gradcli.watch()`) a callback joins that watch and
prints nothing: the command reports (watcher/trainers/triggered.py).
"""

from __future__ import annotations

import sys
from typing import Any


def report(who: str, result: Any) -> None:
    """Write `result`'s text report (render/training/watch.py) to stderr, under the callback's name."""
    from ..render.formats import render
    from ..render.plain import plain_text

    sys.stderr.write(f"gradcli.callbacks.{who}:\n{plain_text(render(result, 'text'))}\n")
    sys.stderr.flush()
