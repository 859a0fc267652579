"""`gradcli watch`: a training run checked at every optimizer step, stopped before a bad update.

The user's own loop runs unchanged. torch's process-wide hooks see every `optimizer.step()`
(session.py); before each one, one reduction over the step's loss and gradients is read back
to the host once (reading.py). A non-finite value raises `WatchStop` from the step's
pre-hook, so the parameters and the optimizer state stay as the previous step left them; the
bad step is then replayed with gradcli's forward recorder armed to find where the first nan
or inf was born and why (replay.py, rerun.py). Spikes (spikes.py) and gradient health
(health.py) are findings reported at their step.

The package is called `watcher` and not `watch`: `gradcli.watch` is the function users call,
and a subpackage of the same name would replace that attribute when imported.
"""
