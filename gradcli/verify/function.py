"""`check-function`: is the backward of a user's torch.autograd.Function right?

    >>> import gradcli
    >>> result = gradcli.check_function(MySwish, ref="x*sigmoid(x)", order=2)
    >>> result.ok, print(result)

`check_function(function, var=(), *, ref=None, order=1, seed=None, library_dirs=())`
takes the class itself or "path/to/file.py:ClassName" (importing the file runs it). It runs
torch's gradcheck (and gradgradcheck with order=2) and, to show a mismatch readably, builds
both Jacobians itself (`jacobian.py`): which input, which element, expected vs got. With
`ref`, the forward is compared with the reference expression's values and the backward
with sympy's derivative of it. Likely causes are named (`diagnose.py`). The result has
`ok` and a readable `str()`; `as_dict()` is the `--json` document. The `demo swish`
command reuses this function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from .. import words
from ..errors import UsageError, UserCodeError
from ..options import checked_seed
from . import diagnose
from .fdarbiter import ATOL, EPS, FLAT_FORWARD, LEAVES_DOMAIN, RTOL, STEP_ROUNDED, Differences, reason
from .gradchecks import GradcheckVerdict, run_gradcheck
from .jacobian import JACOBIAN_MAX, InputCheck, analytical, backward_of, compare_blocks, flat_output, numerical
from .points import refuse_unusable
from .reference import ForwardCheck, reference_checks
from .evaluation import check_order
from .result import FiniteDifferences, finite_difference_checks
from .userfile import Inputs, check_class, describe_exception, load_function, make_inputs


@dataclass
class FunctionResult:
    """What check_function found: `ok`, `str()`, `as_dict()`."""

    function: str
    order: int
    inputs: Inputs
    gradcheck: GradcheckVerdict
    gradgradcheck: GradcheckVerdict | None = None
    first: list[InputCheck] = field(default_factory=list)
    second: list[InputCheck] = field(default_factory=list)
    ref: str | None = None
    ref_forward: ForwardCheck | None = None
    ref_first: list[InputCheck] = field(default_factory=list)
    ref_second: list[InputCheck] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def checks(self) -> list[FiniteDifferences]:
        """gradcheck (and gradgradcheck at order 2) as uniform records."""
        return list(finite_difference_checks(self.gradcheck, self.gradgradcheck))

    @property
    def ok(self) -> bool:
        checks = [*self.first, *self.second, *self.ref_first, *self.ref_second]
        return (all(c.ok for c in checks) and all(check.verdict.ok is not False for check in self.checks)
                and (self.ref_forward is None or self.ref_forward.ok))

    def sections(self) -> list[tuple[str, list[InputCheck]]]:
        return [
            ("first derivatives: your backward vs finite differences", self.first),
            ("second derivatives: double backward vs finite differences of your backward", self.second),
            (f"first derivatives: your backward vs sympy's derivative of {self.ref}", self.ref_first),
            (f"second derivatives: double backward vs sympy's of {self.ref}", self.ref_second),
        ]

    def verdict(self) -> str:
        if self.ok:
            done = [check.label for check in self.checks] + ([f"the reference {self.ref}"] if self.ref else [])
            return f"OK: {self.function} agrees with " + ", ".join(done)
        return "PROBLEM: " + (self.causes[0] if self.causes else _first_problem(self))

    def as_dict(self) -> dict[str, Any]:
        values = {n: (v.detach().tolist() if isinstance(v, torch.Tensor) else v)
                  for n, v in zip(self.inputs.names, self.inputs.values)}
        return {
            "function": self.function, "ok": self.ok, "order": self.order, "inputs": values,
            "defaulted": self.inputs.defaulted,
            "gradcheck": self.gradcheck.as_dict(),
            "gradgradcheck": self.gradgradcheck.as_dict() if self.gradgradcheck else None,
            "first_order": [c.as_dict() for c in self.first],
            "second_order": [c.as_dict() for c in self.second],
            "reference": None if self.ref is None else {
                "expression": self.ref,
                "forward": self.ref_forward.as_dict() if self.ref_forward else None,
                "first_order": [c.as_dict() for c in self.ref_first],
                "second_order": [c.as_dict() for c in self.ref_second],
            },
            "likely_causes": self.causes, "notes": self.notes, "verdict": self.verdict(),
        }

    def __str__(self) -> str:
        lines = [f"check-function {self.function} (order {self.order}): {'ok' if self.ok else 'PROBLEM'}"]
        lines += [f"  {name} = {words.input_value(value)}" for name, value in zip(self.inputs.names, self.inputs.values)]
        if self.ref_forward is not None:
            lines.append(f"  forward vs {self.ref}: {self.ref_forward}")
        for title, checks in self.sections():
            for c in checks:
                lines.append("  " + words.input_check_line(title, c))
                lines.extend(f"    {m}" for m in c.mismatches)
        lines += [f"  {check.label}: {words.describe_gradcheck(check.verdict)}" for check in self.checks]
        lines.extend(f"  likely cause: {c}" for c in self.causes)
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.append(self.verdict())
        return "\n".join(lines)


def _first_problem(result: FunctionResult) -> str:
    if result.ref_forward is not None and not result.ref_forward.ok:
        return f"the forward differs from {result.ref}"
    for title, checks in result.sections():
        for c in checks:
            if not c.ok:
                first = f": {c.mismatches[0]}" if c.mismatches else ""
                return f"{title} disagree for {c.name}{first}"
    for check in result.checks:
        if check.verdict.ok is False:
            return words.gradcheck_problem(check.label, check.verdict)
    return "a check failed"


def check_function(
    function: Any,
    var: Mapping[str, str] | Sequence[str] = (),
    *,
    ref: str | None = None,
    order: int = 1,
    seed: int | None = None,
    library_dirs: Sequence[Any] = (),
    given: Mapping[str, object] | None = None,
) -> FunctionResult:
    """Check a torch.autograd.Function (a class, or "PATH.py:NAME"); see the module docstring."""
    check_order(order)
    if isinstance(function, str):
        cls, label = load_function(function), function
    else:
        cls = check_class(function, getattr(function, "__name__", repr(function)))
        label = cls.__name__
    options = [f"{k}={v}" for k, v in var.items()] if isinstance(var, Mapping) else list(var)
    refuse_unusable(options, torch.float64)
    seed = 0 if seed is None else checked_seed(seed)
    inputs = make_inputs(cls, options, seed, given=given)
    tensors = {n: t.detach().to(torch.float64) for n, t in inputs.tensors().items()}
    if not tensors:
        raise UsageError(f"{label}: forward has no tensor inputs to differentiate")

    def fn(values: dict[str, torch.Tensor]) -> Any:
        args = [values[n] if t else v for n, v, t in zip(inputs.names, inputs.values, inputs.tensor)]
        return cls.apply(*args)  # type: ignore[attr-defined]

    out = _run_user(lambda: fn({n: t.clone().requires_grad_(True) for n, t in tensors.items()}), "forward", cls)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        raise UserCodeError(f"{label}: forward returned {type(out).__name__}, not a tensor (or tuple of tensors)")
    result = FunctionResult(label, order, inputs, GradcheckVerdict(None))
    leaves = {n: t.clone().requires_grad_(True) for n, t in tensors.items()}
    saved = diagnose.saved_intermediates(_run_user(lambda: fn(leaves), "forward", cls), leaves)
    size = sum(t.numel() for t in tensors.values())
    small = size <= JACOBIAN_MAX and sum(o.numel() for o in outs) <= JACOBIAN_MAX
    names = list(tensors)

    def positional(*xs: torch.Tensor) -> Any:
        return fn(dict(zip(names, xs)))

    result.gradcheck = _run_user(lambda: run_gradcheck(positional, list(tensors.values()), seed=seed), "backward", cls)
    if small:
        result.first = compare_blocks(
            _run_user(lambda: analytical(fn, tensors), "backward", cls), numerical(fn, tensors), tensors, "out"
        )
        result.causes += diagnose.first_order_causes(result.first, tensors)
    else:
        result.notes.append(f"the inputs have {size:,} elements: only gradcheck (fast mode) runs past {JACOBIAN_MAX:,}")
    if order == 2:
        result.gradgradcheck = _run_user(
            lambda: run_gradcheck(positional, list(tensors.values()), seed=seed, second=True), "backward", cls
        )
        if small:
            gradient = backward_of(fn)
            result.second = compare_blocks(
                _run_user(lambda: _analytical_second(gradient, tensors), "backward", cls),
                _run_user(lambda: numerical(gradient, tensors), "backward", cls), tensors, "grad",
            )
            result.causes += diagnose.second_order_causes(
                result.second, first_ok=all(c.ok for c in result.first), saved_intermediates=saved,
                once_differentiable=diagnose.is_once_differentiable(cls),
            )
    if ref is not None:
        result.ref = ref
        got_first = _run_user(lambda: analytical(fn, tensors), "backward", cls) if small else None
        got_second = (_run_user(lambda: _analytical_second(backward_of(fn), tensors), "backward", cls)
                      if small and order == 2 else None)
        result.ref_forward, result.ref_first, result.ref_second, notes = reference_checks(
            ref, inputs, flat_output(fn, tensors).detach(), got_first, got_second, library_dirs
        )
        result.notes += notes
        if small:
            _settle_with_reference(result, fn, tensors)
    elif small:
        _explain_without_reference(result, fn, tensors)
    return result


def _explain_without_reference(result: FunctionResult, fn: Any, tensors: dict[str, torch.Tensor]) -> None:
    """Without a reference there is no exact derivative to settle a disagreement, so it
    stands; but where the finite differences are plainly broken (the step is lost to
    rounding, leaves the domain, or the forward does not move) the note says so."""
    broken: dict[str, int] = {}
    for check in result.first:
        bad = ~((check.got - check.expected).abs() <= ATOL + RTOL * check.expected.abs())
        for i, j in bad.nonzero().tolist():
            why = _entry_reason(fn, tensors, check.name, i, j, check.got[i, j].item())
            if why in (STEP_ROUNDED, LEAVES_DOMAIN, FLAT_FORWARD):
                broken[why] = broken.get(why, 0) + 1
    if broken:
        listed = "; ".join(f"{why}: {n:,}" for why, n in sorted(broken.items(), key=lambda item: -item[1]))
        result.notes.append(f"finite differences are unreliable at {sum(broken.values()):,} of the disagreeing "
                            f"Jacobian entries ({listed}): give --ref EXPR to decide them with the exact derivative")


def _settle_with_reference(result: FunctionResult, fn: Any, tensors: dict[str, torch.Tensor]) -> None:
    """Finite differences do not overrule an exact derivative (fdarbiter.py): where they
    disagree with your backward but the reference's derivative agrees with it everywhere,
    the disagreeing entries are finite differences' fault, counted with their reason."""
    failed = result.gradcheck.ok is False or not all(c.ok for c in result.first)
    reference_agrees = (result.ref_forward is not None and result.ref_forward.ok and result.ref_first
                        and all(c.ok for c in result.ref_first))
    if not failed or not reference_agrees:
        return
    reasons: dict[str, int] = {}
    for check in result.first:
        bad = ~((check.got - check.expected).abs() <= ATOL + RTOL * check.expected.abs())
        for i, j in bad.nonzero().tolist():
            why = _entry_reason(fn, tensors, check.name, i, j, check.got[i, j].item())
            reasons[why] = reasons.get(why, 0) + 1
        check.count, check.mismatches, check.max_abs_err = 0, [], 0.0
    count = sum(reasons.values())
    if count:
        listed = "; ".join(f"{why}: {n:,}" for why, n in sorted(reasons.items(), key=lambda item: -item[1]))
        sentence = (f"finite differences are unreliable at {count:,} Jacobian entr{'ies' if count != 1 else 'y'} "
                    f"({listed}), where your backward agrees with the derivative of {result.ref}")
        result.notes.append(f"gradcheck: {sentence}")
    if result.gradcheck.ok is False:
        result.gradcheck = GradcheckVerdict(True, result.gradcheck.fast_mode, sentence if count else None,
                                            result.gradcheck.points, count, reasons)


def _entry_reason(fn: Any, tensors: dict[str, torch.Tensor], name: str, i: int, j: int, exact: float) -> str:
    """Why the central difference of output i in element j of `name` misleads."""
    flat = tensors[name].reshape(-1)
    outputs = []
    with torch.no_grad():
        for sign in (1, -1):
            moved = flat.clone()
            moved[j] += sign * EPS
            outputs.append(flat_output(fn, {**tensors, name: moved.reshape(tensors[name].shape)})[i].to(torch.float64))
    plus, minus = (torch.stack([o]) for o in outputs)
    diffs = Differences(flat[j:j + 1].to(torch.float64), plus, minus, (plus - minus) / (2 * EPS))
    return reason(diffs, 0, exact)


def _analytical_second(gradient: Any, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    try:
        return analytical(gradient, tensors)
    except RuntimeError:
        # Double backward refused (e.g. a backward that is not differentiable): the
        # analytic second derivative is then what autograd can give, nothing.
        probe = gradient(tensors)
        return {n: torch.zeros(probe.numel(), t.numel(), dtype=torch.float64) for n, t in tensors.items()}


def _run_user(call: Any, what: str, cls: type) -> Any:
    """Run the user's forward/backward; their exceptions become UserCodeError (exit 2)."""
    try:
        return call()
    except UserCodeError:
        raise
    except (Exception, SystemExit) as err:  # sys.exit() in a backward is the user's code too
        import inspect
        from pathlib import Path

        try:
            path = Path(inspect.getfile(cls))
        except TypeError:
            path = None
        raise UserCodeError(f"{cls.__name__}.{what} raised {describe_exception(err, path)}") from None
