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
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch

from .. import limits
from .._deep import run_deep
from ..build.variables import default_spec, make_leaves, parse_var, resolve_dtype
from ..errors import DomainError, LimitError, ShapeError, UsageError, VariableError
from ..language.library import Library
from ..language.expansion import expanded_nodes
from ..options import checked_seed, checked_tolerance
from ..pipeline import load
from ..seeds import draw_seed
from .boundaries import any_near_boundary, near_boundaries
from .compare import Target, compare
from .evaluation import TOLERANCES, check_order, evaluate, symbolic_side
from .coordinates import at_kink, held_fixed
from .domain import defined_at
from .exact import exact_autograd, exact_formulas, exact_targets
from .gradchecks import GradcheckVerdict, run_gradcheck, spaced
from .plan import EXACT_MAX_ELEMENTS, Plan, make_plan
from .points import (
    DEFAULT_POINTS, SPECIAL, Points, check_point_total, domain_points, drawn_points, refuse_unusable,
)
from .published import published_values
from .result import CheckResult
from .settle import settle_elementwise, settle_exact
from .symbolic import simplify_all

#: Most second derivatives (elements squared) compared exactly at order 2 in exact mode.
EXACT_SECOND_MAX_ENTRIES = 256
#: Default values of variables without --var in the exact (small tensor) mode.
EXACT_DEFAULT = "randn(4)"


def check(
    expression: str,
    var: Mapping[str, str] | Sequence[str] = (),
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
    """Check the gradient of `expression`; returns a CheckResult (`.ok`, readable `str()`).

    `var` gives values like --var: {"x": "linspace(-3, 3, 101)"} or ["x=linspace(-3,3,101)"].
    Without values, points come from the library entry's domain (when the expression is one
    library call) or `points` uniform draws (default DEFAULT_POINTS) plus special points.
    `simplify=False` shows the derivatives as differentiated (saves up to SIMPLIFY_BUDGET s).
    `explain` names the cause of every wrong or non-finite gradient (verify/causes.py) and
    proves the rewrites that fix them (verify/fixes.py); `explain=False` only checks.
    Raises GradcliError for bad input (exit 2 on the command line).
    """
    check_order(order)
    if points is not None and points < 1:
        raise UsageError("--points must be at least 1")
    if points is not None and points > limits.MAX_ELEMENTS:  # refused before any allocation
        raise LimitError(f"--points {points:,} is more than the limit of {limits.MAX_ELEMENTS:,}")
    resolve_dtype(dtype)
    checked_seed(seed)
    checked_tolerance("atol", atol)
    checked_tolerance("rtol", rtol)
    options = [f"{k}={v}" for k, v in var.items()] if isinstance(var, Mapping) else list(var)
    refuse_unusable(options, resolve_dtype(dtype))
    program, library = load(expression, library_dirs)
    plan = run_deep(make_plan, program, library)  # a 20,000-level program recurses as deep
    every_variable, program = program.variables, plan.program  # without dead statements
    _refuse_integers(options, program.variables)
    default_rtol, default_atol = TOLERANCES[dtype]
    tol = {"rtol": default_rtol if rtol is None else rtol, "atol": default_atol if atol is None else atol}
    seed = draw_seed() if seed is None else seed
    result = CheckResult(expression, order, dtype, plan.mode, "", tol, seed=seed)
    unused = [v for v in every_variable if v not in program.variables]
    if unused:
        result.notes.append(f"not used by the output, so not checked: {', '.join(unused)}")
    if plan.mode in ("elementwise", "reduced"):
        pts = _elementwise_points(program.variables, every_variable, options, plan, points, seed, result)
        limits.check_work(sum(t.numel() for t in pts.values()), expanded_nodes(program, library.functions))
        _check_elementwise(result, program, plan, library, pts, device, simplify)
    else:
        leaves = _finite(make_leaves)(every_variable, options, dtype="float64", device="cpu", seed=seed,
                             default=lambda name, index: EXACT_DEFAULT)
        _drop(leaves, program.variables)
        result.points_source = _describe_leaves(leaves)
        _check_small(result, program, plan, library, leaves.tensors, device)
    if explain and (not result.ok or result.causes):
        from .fixes import propose

        def rerun(text: str) -> CheckResult:
            return check(text, options, points=points, order=order, atol=atol, rtol=rtol, dtype=dtype, device=device,
                         seed=seed, library_dirs=library_dirs, simplify=False, explain=False)

        propose(result, program, library, rerun)
    return result


def _refuse_integers(options: Sequence[str], used: Sequence[str]) -> None:
    """Refuse integer variables (randint): they have no gradient to compare."""
    integers = [spec.name for spec in map(parse_var, options) if spec.integer and spec.name in used]
    if not integers:
        return
    listed = ", ".join(integers)
    if len(integers) == len(used):
        raise UsageError(
            f"nothing to check: {listed} {'holds' if len(integers) == 1 else 'hold'} integers (randint), "
            "data without a gradient, and the output uses no other variable",
            hint="give float values to check a derivative, e.g. --var 'x=randn(4)'; "
            "gradcli trace shows how integer data flows",
        )
    raise UsageError(
        f"check compares the derivative in every variable, and {listed} "
        f"{'holds' if len(integers) == 1 else 'hold'} integers (randint): data with no derivative to compare",
        hint="give float values to check that variable too (e.g. uniform(0, 10, ...)), "
        "or use gradcli trace, which keeps integer data out of the gradients",
    )


def _drop(leaves: Any, names: Sequence[str]) -> None:
    """Keep the leaves of `names` only (variables the output uses)."""
    for table in (leaves.tensors, leaves.specs):
        for name in [k for k in table if k not in names]:
            del table[name]


def _elementwise_points(
    names: Sequence[str], every_variable: Sequence[str], options: list[str], plan: Plan, count: int | None,
    seed: int, result: CheckResult,
) -> dict[str, torch.Tensor]:
    if options:
        leaves = _finite(make_leaves)(every_variable, options, dtype="float64", seed=seed, default=lambda n, i: default_spec(i))
        _drop(leaves, names)
        if count is not None:
            result.notes.append("--points is ignored: --var gives the values")
        try:
            shape = torch.broadcast_shapes(*(t.shape for t in leaves.tensors.values()))
        except RuntimeError:  # each point takes one value of every variable: the shapes must broadcast
            shapes = ", ".join(f"{n} {list(t.shape)}" for n, t in leaves.tensors.items())
            raise ShapeError(f"check takes one value of every variable per point, and the --var shapes cannot be "
                             f"broadcast together: {shapes}", hint="give shapes that broadcast (trailing sizes equal "
                             "or 1), e.g. the same shape for every variable") from None
        check_point_total(shape.numel(), len(names))  # before broadcasting copies them
        values = torch.broadcast_tensors(*(t.detach() for t in leaves.tensors.values()))
        result.points_source = _describe_leaves(leaves)
        return {name: v.reshape(-1).clone() for name, v in zip(names, values)}
    count = count or DEFAULT_POINTS
    check_point_total(count + len(SPECIAL), len(names))  # the special points come on top
    if plan.entry is not None:
        found: Points = domain_points(names[0], plan.entry, count)
    else:
        found = drawn_points(names, count, seed)
    result.points_source = found.source
    return found.tensors


def _finite(make: Any) -> Any:
    """`make` (make_leaves), refusing nan/inf values: no derivative is compared at such a point."""

    def checked(*args: Any, **kwargs: Any) -> Any:
        leaves = make(*args, **kwargs)
        for name, tensor in leaves.tensors.items():
            if not bool(torch.isfinite(tensor).all()):
                raise VariableError(f"--var {name} holds nan or inf, where no derivative can be compared",
                                    hint="gradcli trace ... --flow shows where a nan or inf goes")
        return leaves

    return checked


def _describe_leaves(leaves: Any) -> str:
    parts = []
    for name, spec in leaves.specs.items():
        given = "default" if name in leaves.defaulted else "--var"
        parts.append(f"{name}={spec.text} ({given})")
    return ", ".join(parts)


def _check_elementwise(
    result: CheckResult, program: Any, plan: Plan, library: Library, pts: dict[str, torch.Tensor], device: str,
    simplify: bool,
) -> None:
    names = list(program.variables)
    size = next(iter(pts.values())).numel() if pts else 1
    ev = evaluate(program, plan, library, pts, order=result.order, dtype=result.dtype, device=device,
                  seed=result.seed or 0, **_tol(result))
    if ev.autograd_error is not None:
        result.autograd_error = ev.autograd_error
        return
    rounded = {n: v.detach().to(resolve_dtype(result.dtype)).to(torch.float64).clone() for n, v in pts.items()}
    result.points = rounded
    result.autograd_nonfinite = sum(int((~torch.isfinite(v)).sum()) for v in ev.autograd.values())
    if ev.symbolic_skipped is not None:
        result.symbolic_skipped = f"{ev.symbolic_skipped}; gradcheck still runs"
    if ev.targets is not None and ev.formulas is not None:
        targets = ev.targets
        _show(result, ev.formulas.first, ev.formulas.second, simplify)
        first = [targets[n] for n in names]
        if names and all(bool(t.undefined.all()) for t in first):
            raise DomainError(
                f"the derivative is undefined at every one of the {size:,} points (outside the domain)",
                hint="give values inside the domain with --var, e.g. --var 'x=uniform(0.1, 5, 1000)'",
            )
        for key, comparison in ev.comparisons.items():
            (result.variables if isinstance(key, str) else result.second).append(comparison)
        if result.variables and all(c.points == 0 for c in result.variables) and any(c.kinks for c in result.variables):
            # "OK ... (0 values)" would pass a check that compared nothing, as a domain miss does not
            raise DomainError(
                f"nothing to compare: every one of the {size:,} points is at a kink of the derivative (or outside "
                "the domain), where autograd is not compared",
                hint="give points beside the kink too, e.g. --var 'x=linspace(-1, 1, 21)'",
            )
        if plan.entry is not None and plan.entry.derivative is not None and result.order >= 1:
            value = published_values(plan.entry, plan.entry_call, rounded[names[0]], library)
            result.published.append(
                compare(value, targets[names[0]], candidate_name="published", largest=_largest(torch.float64),
                        seed=result.seed or 0, **_tol(result))
            )
        result.causes = _causes(result, plan, library, rounded, ev, program.source)
        keep = ~ev.outside & ~ev.near_kink
        for t in first:
            keep &= ~t.undefined & torch.isfinite(t.reference)
        _gradchecks_elementwise(result, program, library, names, rounded, keep, (plan, targets, size))
        return
    near = near_boundaries(program, library, rounded, size)
    if bool(near.any()):
        result.notes.append(
            f"{int(near.sum()):,} of {size:,} points are at or next to a branch boundary or a kink "
            "(found with torch, the symbolic side being skipped): kept out of finite differences"
        )
    _gradchecks_elementwise(result, program, library, names, rounded, ~near)


def _causes(result: CheckResult, plan: Plan, library: Library, rounded: dict[str, torch.Tensor], ev: Any,
            source: str) -> list[Any]:
    """Why autograd is wrong or not finite where it is (verify/causes.py)."""
    from .causes import find_causes

    return find_causes(plan.body, library, rounded, ev.autograd, ev.targets, dtype=resolve_dtype(result.dtype),
                       source=source, outside=ev.outside, **_tol(result))


def _show(result: CheckResult, first: dict[Any, Any], second: dict[Any, Any], simplify: bool) -> None:
    import sympy

    shown = simplify_all({**first, **second}) if simplify else {**first, **second}
    for key, expr in shown.items():
        if isinstance(key, str):
            result.symbolic[key] = sympy.sstr(expr)
            try:
                result.pretty[key] = sympy.pretty(expr, use_unicode=True, wrap_line=False)
            except Exception:  # noqa: BLE001 - sympy's pretty printer fails on some ITE forms
                pass  # the renderer falls back to the plain form
        else:
            result.symbolic_second[",".join(key)] = sympy.sstr(expr)


def _compare_all(
    result: CheckResult, auto: dict[Any, torch.Tensor], targets: dict[Any, Target], names: list[str], dtype: Any
) -> None:
    for key, target in targets.items():
        comparison = compare(auto[key], target, candidate_name="autograd", largest=_largest(dtype),
                             seed=result.seed or 0, **_tol(result))
        (result.variables if isinstance(key, str) else result.second).append(comparison)


def _tol(result: CheckResult) -> dict[str, float]:
    return {"atol": result.tolerances["atol"], "rtol": result.tolerances["rtol"]}


def _largest(dtype: Any) -> float:
    return float(torch.finfo(dtype).max)


def _gradchecks_elementwise(
    result: CheckResult, program: Any, library: Library, names: list[str], rounded: dict[str, torch.Tensor],
    keep: torch.Tensor, exact: tuple[Plan, dict[Any, Target], int] | None = None,
) -> None:
    """gradcheck on the kept points; with `exact` (plan, targets, size) a failure is settled
    with the exact derivative (settle.py)."""
    index = keep.nonzero().flatten()
    index = index[spaced(index.numel())]
    inputs = [rounded[n][index] for n in names]
    _gradchecks(result, program, library, names, inputs, "no point is left for finite differences" if not index.numel() else None)
    if exact is not None and index.numel():
        plan, targets, size = exact

        def rerun(kept: torch.Tensor, second: bool) -> GradcheckVerdict:
            return run_gradcheck(_torch_fn(program, library, names), [x[kept] for x in inputs], seed=result.seed,
                                 second=second)

        settle_elementwise(result, plan, library, names, {n: x for n, x in zip(names, inputs)}, index, targets,
                           size, rerun)


def _gradchecks(
    result: CheckResult, program: Any, library: Library, names: list[str], inputs: list[torch.Tensor],
    reason: str | None, held: list[torch.Tensor] | None = None,
) -> None:
    """gradcheck (and gradgradcheck) unless `reason` says why not; elements marked in `held`
    keep their values (coordinates.py)."""
    fn = _torch_fn(program, library, names)
    if held is not None:
        fn, inputs = held_fixed(fn, inputs, held)
    if reason is None and not names:
        reason = "the expression has no variables"
    if reason is None:
        probe = fn(*(x.detach().double().requires_grad_(True) for x in inputs))
        if not isinstance(probe, torch.Tensor) or not probe.requires_grad:
            reason = "the expression does not depend on its variables"
        elif not bool(torch.isfinite(probe.detach()).all()):
            reason = "the function is not finite at the points left"
    if reason is not None:
        result.gradcheck = GradcheckVerdict(None, message=reason)
        if result.order == 2:
            result.gradgradcheck = GradcheckVerdict(None, message=reason)
        return
    result.gradcheck = run_gradcheck(fn, inputs, seed=result.seed)
    if result.order == 2:
        result.gradgradcheck = run_gradcheck(fn, inputs, seed=result.seed, second=True)


def _torch_fn(program: Any, library: Library, names: list[str]) -> Any:
    from ..build.to_torch import build

    def fn(*xs: torch.Tensor) -> Any:
        return build(program, dict(zip(names, xs)), library=library).output

    return fn


def _check_small(
    result: CheckResult, program: Any, plan: Plan, library: Library, values: dict[str, torch.Tensor], device: str
) -> None:
    names = list(program.variables)
    total = sum(t.numel() for t in values.values())
    coupling = ", ".join(plan.coupling)
    if total > EXACT_MAX_ELEMENTS:
        result.mode = "skipped"
        result.symbolic_skipped = (
            f"{coupling} couple the elements, so the derivative is compared exactly with one symbol per "
            f"element, which is done up to {EXACT_MAX_ELEMENTS} elements; the variables have {total:,} "
            "(give smaller --var values for the exact comparison); gradcheck still runs"
        )
        _coupled_gradchecks(result, program, library, names, values, any_near_boundary(program, library, values))
        return
    torch_dtype = resolve_dtype(result.dtype)
    rounded = {n: v.detach().to(torch_dtype).to(torch.float64).clone() for n, v in values.items()}
    leaves = {n: v.detach().to(torch_dtype).to(device).clone().requires_grad_(True) for n, v in values.items()}
    try:
        auto = {k: v.cpu() for k, v in exact_autograd(program, library, leaves, result.order).items()}
    except RuntimeError as err:
        result.autograd_error = str(err).strip().splitlines()[0]
        return
    result.points = rounded
    result.autograd_nonfinite = sum(int((~torch.isfinite(v)).sum()) for v in auto.values())
    symbolic_order = result.order
    if result.order == 2 and total * total > EXACT_SECOND_MAX_ENTRIES:
        # sympy's second derivatives grow as elements squared, each a large formula to derive and
        # evaluate at 50 digits: a 32-element softmax took 75 s at order 2 (6 s at order 1).
        symbolic_order = 1
        result.notes.append(
            f"the {total} elements have {total * total:,} second derivatives, more than the "
            f"{EXACT_SECOND_MAX_ENTRIES} compared exactly: gradgradcheck checks them numerically "
            f"(give {math.isqrt(EXACT_SECOND_MAX_ENTRIES)} elements or fewer for the exact comparison)"
        )
    shapes = {n: tuple(v.shape) for n, v in values.items()}
    targets, skipped = symbolic_side(
        lambda: exact_targets(exact_formulas(program, library, shapes, symbolic_order), rounded,
                              lambda: defined_at(program, library, rounded)))
    if targets is None:
        result.symbolic_skipped = f"{skipped}; gradcheck still runs"
    else:
        result.notes.append(
            f"{coupling} couple the elements: the gradient of sum(w*y) with distinct weights w is compared, "
            "element by element, with sympy's (one symbol per element)"
        )
        if names and all(bool(targets[n].undefined.all()) for n in names):
            raise DomainError("the derivative is undefined at the given values (outside the domain)",
                              hint="give values inside the domain with --var")
        _compare_all(result, auto, targets, names, torch_dtype)
        near = any(t.near is not None and bool(t.near.any()) for t in targets.values())
    if result.symbolic_skipped:
        near = any_near_boundary(program, library, rounded)
    undefined = _undefined_elements(targets, rounded) if targets is not None else None
    if _coupled_gradchecks(result, program, library, names, rounded, near, undefined) and not result.symbolic_skipped:
        settle_exact(result, program, library, names, rounded, targets)
    if targets is not None:
        result.causes = _element_causes(result, program, library, rounded, auto, targets)


def _undefined_elements(targets: dict[Any, Target], values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """Per variable, the elements where its exact derivative is undefined (the norm of a zero
    row): finite differences there measure nothing, so gradcheck holds them fixed."""
    found = {n: targets[n].undefined.reshape(values[n].shape) for n in values if n in targets}
    return found if any(bool(m.any()) for m in found.values()) else None


def _element_causes(result: CheckResult, program: Any, library: Library, values: dict[str, torch.Tensor],
                    auto: dict[Any, torch.Tensor], targets: dict[Any, Target]) -> list[Any]:
    """Why autograd is wrong or not finite at some elements (verify/element_causes.py)."""
    from .element_causes import find_element_causes

    return find_element_causes(program, library, values, auto, targets, dtype=resolve_dtype(result.dtype),
                               source=program.source, **_tol(result))


def _coupled_gradchecks(
    result: CheckResult, program: Any, library: Library, names: list[str], values: Mapping[str, torch.Tensor],
    near: bool, undefined: Mapping[str, torch.Tensor] | None = None,
) -> bool:
    """gradcheck of a program whose operations couple elements. When some element is `near`
    a kink, the elements whose own move changes a branch are found one by one and held
    fixed (coordinates.py); so are the `undefined` ones (no derivative to measure); the
    others are still checked. True when every element was."""
    inputs = [values[n] for n in names]
    if not near and undefined is None:
        _gradchecks(result, program, library, names, inputs, None)
        return True
    held = at_kink(program, library, {n: values[n] for n in names}) if near else {
        n: torch.zeros(values[n].shape, dtype=torch.bool) for n in names}
    if held is None:
        _gradchecks(result, program, library, names, inputs, KINK_REASON)
        return False
    total = sum(h.numel() for h in held.values())
    kinks = sum(int(h.sum()) for h in held.values())
    if undefined is not None:
        held = {n: held[n] | undefined[n] if n in undefined else held[n] for n in names}
    count = sum(int(h.sum()) for h in held.values())
    if count == total:
        _gradchecks(result, program, library, names, inputs, KINK_REASON)
        return False
    if kinks:
        result.notes.append(
            f"{kinks:,} of {total:,} elements are at or next to a kink (moving one alone changes a branch): "
            "held fixed in gradcheck, the other elements checked"
        )
    if count > kinks:
        result.notes.append(
            f"{count - kinks:,} of {total:,} elements are where the exact derivative is undefined: "
            "held fixed in gradcheck, the other elements checked"
        )
    _gradchecks(result, program, library, names, inputs, None, [held[n] for n in names] if count else None)
    return not count


KINK_REASON = "the values are at or next to a branch boundary or a kink, where finite differences mislead"


def check_all(**options: Any) -> list[CheckResult]:
    """`check` of every library entry, on its first parameter with the others at defaults."""
    from ..language.library import library_folders, load_library

    library = load_library(library_folders(options.get("library_dirs", ())))
    results = []
    for name, entry in sorted(library.functions.items()):
        variable = entry.params[0].name
        results.append(check(f"{name}({variable})", simplify=False, **options))
    return results
