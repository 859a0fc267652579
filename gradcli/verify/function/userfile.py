"""Loading a user's torch.autograd.Function and running its code.

`check-function PATH.py:NAME` imports PATH.py, which runs the code in it exactly as
`python PATH.py` would (module-level code included): that is the point, and the help says
so. Anything the file (or its forward and backward, `run_user`) raises becomes a
UserCodeError (exit 2) naming the file and line, not a traceback. The inputs are made in
verify/function/inputs.py.
"""

from __future__ import annotations

import inspect
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from ...errors import UsageError, UserCodeError

#: Default tensor input: 14 values in [-6, 4] that reach the regions where common Functions
#: change: 0 and +-1 (relu, hardtanh, abs), +-3 (hard-sigmoid, hard-swish) and beyond them
#: (-6, -4, -1.5, 1.5, 3.5, 4: the flat and linear pieces), and a top three close enough
#: (4, 3.5, 3) for sparsemax to keep two of them (a one-hot output has a zero Jacobian). The
#: kinks among them are reported apart (kinks.py), not compared.
DEFAULT_INPUT = (-6.0, -4.0, -3.0, -1.5, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0, 3.5, 4.0)


def load_function(target: str) -> type:
    """The class NAME from PATH.py or from an importable module (`target` is "PATH.py:NAME"
    or "package.module:NAME", NAME possibly dotted): loaded as trace loads code
    (targets/load.py: the file's folder on sys.path, errors in it shown with its own frames)."""
    from ...targets.load import is_code_target, load_object

    if not is_code_target(target):
        raise UsageError(f"'{target}' is not PATH.py:NAME or package.module:NAME",
                         hint="e.g. gradcli check-function my_ops.py:Swish")
    value, where = load_object(target)
    return check_class(value, where)


def is_function_class(value: Any) -> bool:
    return inspect.isclass(value) and issubclass(value, torch.autograd.Function) and value is not torch.autograd.Function


def check_class(value: Any, where: str) -> type:
    if not is_function_class(value):
        kind = type(value).__name__ if not inspect.isclass(value) else f"class {value.__name__}"
        raise UserCodeError(
            f"{where} is a {kind}, not a torch.autograd.Function",
            hint="subclass torch.autograd.Function with static forward(ctx, ...) and backward(ctx, grad)",
        )
    return value


def describe_exception(err: BaseException, path: Path | None = None) -> str:
    """'ValueError: msg (at file.py line 12)': the innermost frame in the user's file."""
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if path is not None and Path(f.filename).resolve() == path.resolve()]
    frame = (mine or frames or [None])[-1]
    where = f" (at {Path(frame.filename).name} line {frame.lineno})" if frame is not None else ""
    return f"{type(err).__name__}: {err}{where}"


def source_file(cls: type) -> Path | None:
    """The file that defines `cls`, or None (a class made in a REPL or by exec)."""
    try:
        return Path(inspect.getfile(cls))
    except TypeError:
        return None


def describe_user_error(cls: type) -> Callable[[BaseException], str]:
    """err -> 'ValueError: ... (at ops.py line 12)', the line in the Function's own file."""
    path = source_file(cls)
    return lambda err: describe_exception(err, path)


def run_user(call: Any, what: str, cls: type) -> Any:
    """Run the user's forward/backward; their exceptions become UserCodeError (exit 2)."""
    try:
        return call()
    except UserCodeError:
        raise
    except (Exception, SystemExit) as err:  # sys.exit() in a backward is the user's code too
        raise UserCodeError(f"{cls.__name__}.{what} raised {describe_user_error(cls)(err)}") from None
