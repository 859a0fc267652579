"""What a user writes instead of `gradcli check-function examples/custom_ops`: a CI loop.

    python bench/handwritten_function_ci.py

Imports every module of the package (pkgutil), finds the torch.autograd.Function subclasses
each one defines, and runs torch.autograd.gradcheck on each with float64 inputs written by
hand for it (the quantiser argument too). The straight-through estimator's backward is meant
to differ from the derivative, so it is checked by hand against what it should return (the
gradient passed through). Prints one line per Function; exit status 1 if any failed, as
`gradcli check-function examples/custom_ops` does (its LeakyReLU is deliberately wrong).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

import torch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))


def inputs_for(name: str) -> tuple:
    """The arguments written by hand for each Function: what no tool can guess."""
    torch.manual_seed(0)
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    return {
        "Swish": (x,),
        "LeakyReLU": (x, 0.01),
        "RMSNorm": (x, 1e-6),
        "StraightThroughRound": (x, torch.round),
    }[name]


def straight_through(function: type, args: tuple) -> bool:
    """An estimator's backward passes the gradient through: check exactly that."""
    g = torch.randn_like(args[0])
    (grad,) = torch.autograd.grad(function.apply(*args), args[0], g)
    return torch.equal(grad, g)


def main() -> int:
    package = importlib.import_module("custom_ops")
    modules = [package] + [importlib.import_module(info.name)
                           for info in pkgutil.walk_packages(package.__path__, "custom_ops.")]
    failed = 0
    for module in modules:
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if not issubclass(cls, torch.autograd.Function) or cls.__module__ != module.__name__:
                continue  # re-exported, or torch's own
            args = inputs_for(name)
            if name == "StraightThroughRound":
                ok = straight_through(cls, args)
            else:
                ok = torch.autograd.gradcheck(cls.apply, args, raise_exception=False)
            failed += not ok
            print(f"{'ok' if ok else 'FAILED':8s} {module.__name__}.{name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
