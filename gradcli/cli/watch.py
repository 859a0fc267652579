"""`gradcli watch`: run a training script as python would, checking every optimizer step."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from ..errors import UsageError
from .app import PlotOption, app, reports_errors


@app.command(
    "watch",
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)
@reports_errors
def watch_command(
    command: Annotated[Optional[List[str]], typer.Argument(
        metavar="SCRIPT",
        help="The training script and its own arguments, as you would give them to python (with -m: the module's arguments).")] = None,
    module: Annotated[Optional[str], typer.Option("-m", metavar="MODULE", help="Run a module as `python -m MODULE` would.")] = None,
    every: Annotated[int, typer.Option("--every", metavar="N", help="Check every N-th optimizer step (1: each one, stopped before a bad update).")] = 1,
    health_every: Annotated[int, typer.Option("--health-every", metavar="M", help="grads' vanishing/exploding verdicts every M-th checked step (0: never).")] = 100,
    window: Annotated[int, typer.Option("--window", metavar="W", help="Checked steps the spike statistic looks back over.")] = 50,
    adam_ratio: Annotated[float, typer.Option("--adam-ratio", metavar="R", help="Warn when a layer's g² passes R times Adam's second moment (Adam-family optimizers).")] = 30.0,
    skips: Annotated[int, typer.Option("--skips", metavar="K", help="GradScaler's skipped steps in a row that make a stop (its scale fell 2**K-fold).")] = 8,
    stop_on: Annotated[Optional[List[str]], typer.Option("--stop-on", metavar="WHAT", help="nonfinite (always) or spike: also stop before a step with a loss, gradient-norm or layer spike, or a layer's g² far above Adam's second moment. Repeatable.")] = None,
    replay: Annotated[bool, typer.Option("--replay/--no-replay", help="Replay a stopped step to find where the first nan or inf was born, and why.")] = True,
    save: Annotated[Optional[Path], typer.Option("--save", metavar="DIR", help="Write the stopped step's replay bundle (weights, optimizer state, inputs, random state) to DIR.")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", metavar="PATH", help="Write the result as JSON to PATH (docs/json.md, watch).")] = None,
    log: Annotated[Optional[Path], typer.Option("--log", "--step-log", metavar="PATH", help="Write one JSON line per checked step to PATH: loss, gradient norm, per-layer norms, spike statistic. Under torchrun write --step-log: torchrun reads --log as an abbreviation of its own --log-dir.")] = None,
    tensorboard: Annotated[Optional[Path], typer.Option("--tensorboard", metavar="DIR", help="Write the step log (loss, gradient norm, per-layer norms, spike statistic) and each finding as text to TensorBoard event files in DIR (torch.utils.tensorboard).")] = None,
    plot: PlotOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No status line on stderr.")] = False,
) -> None:
    """Run a training script exactly as `python SCRIPT ARGS` would, and check every
    optimizer.step() in it: the loss and every gradient finite (one reduction, one host read
    per step), spikes, and gradient health. A non-finite step is stopped BEFORE it is applied,
    replayed to find the operation, module and line where the first nan or inf was born, and
    its cause is named.

    gradcli's options come before the script; everything after it is the script's own.
    Exit status: 0 the script finished and nothing was found, 1 a stop or a finding, 2 the
    script could not be run, or raised an exception of its own (shown as its traceback).
    --plot draws the log (loss, gradient norm, per-layer heat map, flagged steps).

    Examples:

    \b
      gradcli watch examples/watch/train.py --steps 40
      gradcli watch --json result.json --log steps.jsonl examples/watch/train.py --fault log0 --at 12   # exit 1
      gradcli watch -m examples.watch.train --fault inf_batch --at 5                                    # exit 1
    """
    import gc

    from ..watcher.options import WatchOptions
    from ..watcher.script import Script
    from .output import exit_status, say, show

    gc.enable()  # main() turns it off for short commands; a training run needs it
    args = list(command or [])
    if module is None and not args:
        raise UsageError("gradcli watch needs a script (gradcli watch train.py [ARGS...]) or a module (-m package.module)")
    script = Script(None, module, tuple(args)) if module is not None else Script(args[0], None, tuple(args[1:]))
    if plot is not None:
        from ..plot.mpl import picture_format, require_matplotlib

        picture_format(plot)
        require_matplotlib()
    log_path, save = _per_rank(log), _per_rank(save)
    scratch = None
    if plot is not None and log_path is None:
        import tempfile

        # the steps the picture is drawn from, removed once it is (main() leaves without finalizers)
        scratch = tempfile.TemporaryDirectory(prefix="gradcli-watch-")
        log_path = Path(scratch.name) / "steps.jsonl"
    try:
        result, plot = _watched(script, plot, json_path, WatchOptions(
            every=every, health_every=health_every, window=window, adam_ratio=adam_ratio,
            stop_on=tuple(dict.fromkeys(["nonfinite", *(stop_on or [])])),  # type: ignore[arg-type]
            replay=replay, log=log_path, save=save, skips=skips, tensorboard=_per_rank(tensorboard)), quiet)
    finally:
        if scratch is not None:
            scratch.cleanup()
    console = _stderr_console()
    show(result, console=console)
    if plot is not None:
        say(f"picture written to {plot}", console)
    raise typer.Exit(exit_status(result.ok))


def _watched(script: Any, plot: Optional[str], json_path: Optional[Path], options: Any,
             quiet: bool) -> tuple[Any, Optional[str]]:
    """The run watched, its --json written and its --plot drawn (from options.log): the result and
    the picture's path (this rank's)."""
    from ..watcher.run import watch_script

    status = None if quiet else StatusLine()
    try:
        result = watch_script(script, options, listener=status)
    finally:
        if status is not None:
            status.close()
    if json_path is not None:
        from ..render.formats import render

        json_path = _per_rank(json_path)
        json_path.write_text(str(render(result, "json")) + "\n", encoding="utf-8")
    if plot is not None and options.log is not None:
        from ..plot.watch import draw_watch_log

        plot = str(_per_rank(Path(plot)))
        draw_watch_log(options.log, plot, result)
    return result, plot


def _per_rank(path: Optional[Path]) -> Optional[Path]:
    """Under torchrun every rank writes its own files (--json, --log, --save, --plot): rank 0 to
    PATH, rank r to PATH's stem + .rank<r> (a folder: DIR.rank<r>)."""
    import os

    rank = int(os.environ.get("RANK", "0") or 0)
    if path is None or rank == 0:
        return path
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def _stderr_console():  # type: ignore[no-untyped-def]
    """The report goes to stderr: stdout is the script's own."""
    from .output import make_console

    return make_console(stderr=True)


class StatusLine:
    """The live line on stderr: step, loss, gradient norm, checks so far. On a terminal it is
    rewritten in place (at most 10 times a second); elsewhere one line every 10 seconds."""

    def __init__(self) -> None:
        self.terminal = sys.stderr.isatty()
        self.every = 0.1 if self.terminal else 10.0
        self.last = time.monotonic()
        self.checks = 0
        self.shown = False

    def __call__(self, optimizer: str, step: int, reading: object) -> None:
        self.checks += 1
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        loss = getattr(reading, "loss", None)
        norm = getattr(reading, "grad_norm", None)
        text = (f"gradcli watch: {optimizer} step {step}  loss {loss:.4g}  |grad| {norm:.4g}  "
                f"checks {self.checks}") if loss is not None and norm is not None else f"gradcli watch: step {step}"
        if self.terminal:
            sys.stderr.write("\r\x1b[2K" + text)
            self.shown = True
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
