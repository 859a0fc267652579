"""`gradcli check`: autograd against the exact derivative and finite differences.

Three truths on the same points: autograd at the chosen dtype; sympy's derivative of the
same AST, evaluated in float64 and, where that is in doubt, at 50 digits (`arbitrate`);
and torch.autograd.gradcheck / gradgradcheck in float64. A library entry's published
derivative is a fourth, compared with the exact one like autograd is.

    >>> import gradcli
    >>> gradcli.check("x*sigmoid(x)").ok
    True
    >>> gradcli.check("log(1+exp(x))", {"x": "linspace(-1000, 1000, 100001)"}).ok
    False

How an expression is checked depends on its operations (`plan.py`): elementwise ones (and a
final sum/mean of them) at any number of points; others exactly on small tensors; else the
symbolic side is skipped, saying why, and gradcheck still runs.

This module is the entry: options, the plan, then the mode's module (verify/expression/elementwise_mode.py,
verify/expression/exact_mode.py) on the values verify/expression/values.py chose, and the proven rewrites (fixes.py).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ... import limits
from ..._deep import run_deep
from ...interpret.variables import VarInput, VarSpec, read_vars, resolve_device, resolve_dtype
from ...errors import LimitError, UsageError
from ...language.expansion import expanded_nodes
from ...options import checked_seed, checked_tolerance
from ...pipeline import load
from ...seeds import draw_seed
from .context import CheckContext
from .elementwise_mode import check_elementwise
from .exact_mode import check_exact
from .values import elementwise_points, exact_values, refuse_integers
from ...exact.evaluation import TOLERANCES, check_order
from ...exact.plan import make_plan
from ...exact.points import refuse_unusable
from .result import CheckResult


def check(
    expression: str,
    var: VarInput = (),
    *,
    points: int | None = None,
    order: int = 1,
    atol: float | None = None,
    rtol: float | None = None,
    dtype: str = "float64",
    device: str = "cpu",
    seed: int | None = None,
    library_dirs: Sequence[Any] = (),
    simplify: bool = True,
    explain: bool = True,
) -> CheckResult:
    """Check the gradient of `expression`; returns a CheckResult (`.ok`, `.problems()`, the
    JSON document's `as_dict()`). `gradcli.check` returns it as an api.Check, whose `str()` is
    the text `gradcli check` prints.

    `var` gives values like --var: {"x": "linspace(-3, 3, 101)"} or ["x=linspace(-3,3,101)"],
    parsed once, here, and read as parsed by every refusal and by the points.
    Without values, points come from the library entry's domain (when the expression is one
    library call) or `points` uniform draws (default DEFAULT_POINTS) plus special points.
    `simplify=False` shows the derivatives as differentiated (saves up to SIMPLIFY_BUDGET s).
    `explain` names the cause of every wrong or non-finite gradient (verify/causes/at_points.py) and
    proves the rewrites that fix them (verify/expression/fixes.py); `explain=False` only checks.
    Raises GradcliError for bad input (exit 2 on the command line).
    """
    check_order(order)
    if points is not None and points < 1:
        raise UsageError("--points must be at least 1")
    if points is not None and points > limits.MAX_ELEMENTS:  # refused before any allocation
        raise LimitError(f"--points {points:,} is more than the limit of {limits.MAX_ELEMENTS:,}")
    resolve_dtype(dtype)
    resolve_device(device)  # an unavailable device is refused before any work, not a traceback mid-check
    checked_seed(seed)
    checked_tolerance("atol", atol)
    checked_tolerance("rtol", rtol)
    specs = read_vars(var)
    refuse_unusable(specs.values(), resolve_dtype(dtype))
    program, library = load(expression, library_dirs)
    plan = run_deep(make_plan, program, library)  # a 20,000-level program recurses as deep
    every_variable, program = program.variables, plan.program  # without dead statements
    refuse_integers(specs, program.variables)
    default_rtol, default_atol = TOLERANCES[dtype]
    tol = {"rtol": default_rtol if rtol is None else rtol, "atol": default_atol if atol is None else atol}
    seed = draw_seed() if seed is None else seed
    result = CheckResult(expression, order, dtype, plan.mode, "", tol, seed=seed)
    unused = [v for v in every_variable if v not in program.variables]
    if unused:
        result.notes.append(f"not used by the output, so not checked: {', '.join(unused)}")
    result.notes += _floated_integers(specs, program.variables, dtype)
    if plan.mode in ("elementwise", "reduced"):
        pts = elementwise_points(program.variables, every_variable, specs, plan, points, seed, result)
        limits.check_work(sum(t.numel() for t in pts.values()), expanded_nodes(program, library.functions))
        check_elementwise(CheckContext(result, program, plan, library, device), pts, simplify)
    else:
        values = exact_values(program.variables, every_variable, specs, seed, result)
        check_exact(CheckContext(result, program, plan, library, device), values)
    if explain and (not result.ok or result.causes):
        from .fixes import propose

        def rerun(text: str) -> CheckResult:
            return check(text, specs, points=points, order=order, atol=atol, rtol=rtol, dtype=dtype, device=device,
                         seed=seed, library_dirs=library_dirs, simplify=False, explain=False)

        propose(result, program, library, rerun)
    return result


def check_all(**options: Any) -> list[CheckResult]:
    """`check` of every library entry, on its first parameter with the others at defaults."""
    from ...language.library import library_folders, load_library

    from ...seeds import draw_seed

    library = load_library(library_folders(options.get("library_dirs", ())))
    # One seed for every entry, printed once, so that `--seed N` repeats the whole run.
    options = {**options, "seed": draw_seed() if options.get("seed") is None else options["seed"]}
    results = []
    for name, entry in sorted(library.functions.items()):
        variable = entry.params[0].name
        results.append(check(f"{name}({variable})", simplify=False, **options))
    return results


def _floated_integers(specs: Mapping[str, VarSpec], variables: Sequence[str], dtype: str) -> list[str]:
    """A note for each variable written as integers (`x=[1, 2, 3]`): torch.tensor of them is
    int64, and check makes them --dtype floats because it differentiates its variables."""
    from ...interpret.constructors import Values

    notes = []
    for spec in specs.values():
        if spec.name in variables and spec.kind in ("list", "number") and spec.written is Values.INTEGER:
            notes.append(f"{spec.name}: the integers written ({spec.text}) are {dtype} here, as check differentiates "
                         "its variables (torch.tensor of them is int64)")
    return notes
