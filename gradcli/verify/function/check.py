"""`check-function`: is the backward of a user's torch.autograd.Function right?

    >>> import gradcli
    >>> result = gradcli.check_function(MySwish, ref="x*sigmoid(x)", order=2)
    >>> result.ok, print(result)

`check_function(function, var=(), *, ref=None, order=1, seed=None, library_dirs=(), given=None,
output=None)` takes the class itself or "path/to/file.py:ClassName" (importing the file runs
it); its inputs are typed as forward declares them (verify/function/inputs.py) and its outputs
sorted into checked and skipped (verify/function/call.py). It runs
torch's gradcheck (and gradgradcheck with order=2) and, to show a mismatch readably, builds
both Jacobians itself (`jacobian.py`): which input, which element, expected vs got. With
`ref`, the forward is compared with the reference expression's values and the backward
with sympy's derivative of it. Likely causes are named (`diagnose.py`). Beside them: the
contract audit (`verify/function/audit.py`), gradients declared with `expect_grad`
(`surrogate.py`), the jvp (`forward_mode.py`) and torch.func (`verify/function/transforms.py`).

The procedure is here; the result it fills is verify/function/result.py's FunctionResult (`ok`,
`as_dict()` the `--json` document; its text is the renderer's, and `gradcli.check_function`,
gradcli/api.py, returns it with that text as `str()`); where finite differences themselves
fail, verify/function/settle.py says so. The `demo swish` command reuses this function.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from ... import words
from ...errors import UsageError, UserCodeError
from ...options import checked_seed
from . import coverage, diagnose
from ...exact.evaluation import check_order
from .forward_mode import check_forward_mode
from .transforms import check_transforms
from .audit import audit_contract
from .call import FunctionCall, prepare
from .result import FunctionResult
from .settle import explain_without_reference, settle_with_reference
from .grad_output_use import grad_output_findings
from ..finite_differences.gradchecks import GradcheckVerdict, run_gradcheck
from ..finite_differences.jacobian import (ATOL, JACOBIAN_MAX, analytical, backward_of, compare_blocks, flat_output, leaves, numerical,
                       output_weights)
from .kinks import OutsideKink, one_sided_kinks, reference_kink_masks, settle_at_kinks
from ..finite_differences.precision import coarse_grid_expected, settle_coarse_grid
from .projected import PROJECTED_MAX, WEIGHTED, projected_checks
from .reference import reference_checks
from .second_order import explain_second_order
from .surrogate import check_declared, declared_gradients
from .userfile import run_user as _run_user

__all__ = ["FunctionResult", "check_function"]


def check_function(
    function: Any,
    var: Mapping[str, str] | Sequence[str] = (),
    *,
    ref: str | None = None,
    order: int = 1,
    seed: int | None = None,
    library_dirs: Sequence[Any] = (),
    given: Mapping[str, object] | None = None,
    output: int | None = None,
    expect_grad: Sequence[str] = (),
) -> FunctionResult:
    """Check a torch.autograd.Function (a class, or "PATH.py:NAME"); see the module docstring.

    `given` holds actual argument values by name (tensors, numbers, None), used instead of
    --var and defaults: floating tensors are detached, made float64 and differentiated.
    `output` checks only forward's output number `output` (`--output N`)."""
    check_order(order)
    seed = 0 if seed is None else checked_seed(seed)
    call = prepare(function, var, seed=seed, given=given, output=output)
    try:
        return _check(call, ref=ref, order=order, seed=seed, library_dirs=library_dirs, expect_grad=expect_grad)
    except UserCodeError as err:
        raise call.explain(err) from None


def _check(call: FunctionCall, *, ref: str | None, order: int, seed: int, library_dirs: Sequence[Any],
           expect_grad: Sequence[str]) -> FunctionResult:
    cls, label, inputs = call.cls, call.label, call.inputs
    declared = declared_gradients(expect_grad, inputs, label, library_dirs)
    if declared and ref is not None:
        raise UsageError("--expect-grad and --ref cannot be combined yet: check the forward with --ref on its own")
    tensors = dict(call.tensors)
    fixed = {n: tensors.pop(n) for n in declared}  # declared gradients: held out of finite differences

    def fn(values: Mapping[str, torch.Tensor]) -> Any:
        return call.fn({**fixed, **values})

    out = _run_user(lambda: fn(leaves(tensors)), "forward", cls)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    result = FunctionResult(label, order, inputs, GradcheckVerdict(None), outputs=call.outputs, notes=call.notes())
    result.audit = audit_contract(cls, inputs, order)
    if not result.audit.ok:
        result.gradcheck = GradcheckVerdict(None, message="torch refuses this backward: see the contract error")
        return result
    result.audit.findings += grad_output_findings(cls, inputs, seed)
    if declared:
        result.surrogates = _run_user(lambda: check_declared(declared, fn, inputs, seed, library_dirs), "backward", cls)
        result.notes += [f"{n}: finite differences are not used, its gradient is declared by --expect-grad"
                         for n in declared]
        if not tensors:
            result.gradcheck = GradcheckVerdict(None, message="every input's gradient is declared by --expect-grad")
            return result
    size = sum(t.numel() for t in tensors.values())
    out_size = sum(o.numel() for o in outs)
    small = size <= JACOBIAN_MAX and out_size <= JACOBIAN_MAX
    names = list(tensors)

    def positional(*xs: torch.Tensor) -> Any:
        return fn(dict(zip(names, xs)))

    # Second order differentiates sum(w * out), w random: sum(out) is constant for a normaliser.
    weights = output_weights(out_size, seed) if order == 2 else None
    gradient = backward_of(fn, weights)
    kinks_first, kinks_second, by_reference = {}, {}, False
    if ref is not None and small:
        found, kinks_second, kink_notes = reference_kink_masks(ref, inputs, library_dirs, weights, order, out_size)
        by_reference, kinks_first = found is not None, found or {}
        result.notes += kink_notes
    result.gradcheck = _run_user(lambda: run_gradcheck(positional, list(tensors.values()), seed=seed), "backward", cls)
    if small:
        got, expected = _run_user(lambda: analytical(fn, tensors), "backward", cls), numerical(fn, tensors)
        expected, coarse, grid = coarse_grid_expected(fn, tensors, got, expected)
        outside: list[OutsideKink] = []
        if not by_reference:
            kinks_first = _run_user(lambda: one_sided_kinks(fn, tensors, got, expected, outside), "forward", cls)
        result.first = compare_blocks(got, expected, tensors, "out", kinks_first)
        # What was seen at a kink heads the verdict only when it is all that is wrong.
        alone = len(outside) == sum(c.count for c in result.first)
        (result.seen if alone else result.notes).extend(words.outside_kink(k) for k in outside)
        result.causes += diagnose.first_order_causes(result.first, tensors)
        result.gradcheck = settle_coarse_grid(settle_at_kinks(result.gradcheck, result.first), result.first,
                                              coarse, grid)
        result.notes += [f"gradcheck: {result.gradcheck.message}"] if result.gradcheck.unreliable_points else []
    elif size <= PROJECTED_MAX:
        result.first, coarse, grid = _run_user(lambda: projected_checks(fn, tensors, seed, out_size), "backward", cls)
        result.gradcheck = settle_coarse_grid(settle_at_kinks(result.gradcheck, result.first), result.first,
                                              coarse, grid)
        result.notes.append(f"the inputs have {size:,} elements: past {JACOBIAN_MAX:,} the Jacobian is not built; "
                            f"the gradient of {WEIGHTED}, w drawn from [0.5, 1.5) with seed {seed}, is compared "
                            "element by element with central differences, and gradcheck runs in fast mode")
    else:
        result.notes.append(f"the inputs have {size:,} elements: only gradcheck (fast mode) runs past "
                            f"{PROJECTED_MAX:,}")
    second = order == 2 and not diagnose.is_once_differentiable(cls)
    if order == 2 and not second:
        result.gradgradcheck = GradcheckVerdict(None, message="backward is @once_differentiable: not twice "
                                                              "differentiable, by design")
    if second:
        result.gradgradcheck = _run_user(
            lambda: run_gradcheck(positional, list(tensors.values()), seed=seed, second=True), "backward", cls
        )
        if small:
            result.output_weights = weights.tolist()
            got = _run_user(lambda: _analytical_second(gradient, tensors), "backward", cls)
            expected = _run_user(lambda: numerical(gradient, tensors), "backward", cls)
            expected, coarse, grid = _run_user(lambda: coarse_grid_expected(gradient, tensors, got, expected),
                                               "backward", cls)
            if not by_reference:
                kinks_second = _run_user(lambda: one_sided_kinks(gradient, tensors, got, expected), "backward", cls)
            result.second = compare_blocks(got, expected, tensors, "grad", kinks_second)
            result.gradgradcheck = settle_coarse_grid(settle_at_kinks(result.gradgradcheck, result.second),
                                                      result.second, coarse, grid)
            result.notes += ([f"gradgradcheck: {result.gradgradcheck.message}"]
                             if result.gradgradcheck.unreliable_points else [])
            causes, seen = explain_second_order(cls, inputs, tensors, weights, gradient, result.first, result.second,
                                                expected, kinks_second)
            result.causes += causes
            result.seen += seen
            plain_sum = _run_user(lambda: backward_of(fn)(tensors), "backward", cls)
            result.notes.append(coverage.weights_note(bool((plain_sum.abs() <= ATOL).all()), seed))
    result.forward_mode = _run_user(lambda: check_forward_mode(cls, fn, tensors, seed), "backward", cls)
    result.transforms = _run_user(lambda: check_transforms(cls, fn, tensors, seed), "backward", cls)
    if ref is not None:
        result.ref = ref
        got_first = _run_user(lambda: analytical(fn, tensors), "backward", cls) if small else None
        got_second = (_run_user(lambda: _analytical_second(gradient, tensors), "backward", cls)
                      if small and second else None)
        result.ref_forward, result.ref_first, result.ref_second, notes = reference_checks(
            ref, inputs, flat_output(fn, tensors).detach(), got_first, got_second, library_dirs,
            weights=weights, apart=(kinks_first, kinks_second),
        )
        result.notes += notes
        if small:
            settle_with_reference(result, fn, tensors)
    elif small:
        explain_without_reference(result, fn, tensors)
    return result


def _analytical_second(gradient: Any, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    try:
        return analytical(gradient, tensors)
    except RuntimeError:
        # Double backward refused (e.g. a backward that is not differentiable): the
        # analytic second derivative is then what autograd can give, nothing.
        probe = gradient(tensors)
        return {n: torch.zeros(probe.numel(), t.numel(), dtype=torch.float64) for n, t in tensors.items()}
