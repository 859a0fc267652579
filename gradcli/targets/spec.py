"""The model options as one record: what the user's model is, and how it is made, fed, reduced
and seeded.

`TARGET`, `--init`, `--var`, `--loss`, `--loss-init`, `--seed`, `--device` and `--dtype` mean
the same on every model-level command (grads, memory, compare, their distributed runs, and
trace on code). The command line builds this record once (cli/app.py's `model_spec`), the
Python API builds it for a target given as text (targets/resolve.py), and everything that
makes a model reads it: targets/model.py's `on_model` and `model_run`, trace's `CodeTarget`,
and the distributed launcher, which pickles it to every rank (so it holds texts and numbers,
never a model or a tensor, unless the Python API gave a loss callable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    """TARGET and the options that make, feed, reduce and seed it."""

    target: str  # path/to/model.py:NAME or package.module:NAME ("" for an object given from Python)
    var: tuple[str, ...] = ()  # --var NAME=SPEC texts: forward's inputs (and the loss's values)
    init: tuple[str, ...] = ()  # --init KEY=VALUE texts for the class or factory
    loss: Any = None  # --loss: an expression, FILE:NAME, or (from Python) a callable
    loss_init: tuple[str, ...] = ()  # --loss-init KEY=VALUE texts for an nn.Module loss class
    seed: int | None = None  # None: drawn, and reported so that --seed repeats the run
    device: str = "cpu"
    dtype: str | None = None  # None: the model's own
    library_dirs: tuple[str, ...] = ()  # --library folders the --loss expression may call into

    @classmethod
    def of(cls, target: str, var: Any = (), *, init: Any = (), loss: Any = None, loss_init: Any = (),
           seed: int | None = None, device: str = "cpu", dtype: str | None = None, library_dirs: Any = ()) -> "ModelSpec":
        """The record from options as a command line or a caller gives them (None for a
        repeatable option not given, lists, paths)."""
        return cls(target, tuple(var or ()), tuple(init or ()), loss, tuple(loss_init or ()), seed, device, dtype,
                   tuple(str(d) for d in library_dirs or ()))
