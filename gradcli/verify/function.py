"""`check-function`: is the backward of a user's torch.autograd.Function right?

    >>> import gradcli
    >>> result = gradcli.check_function(MySwish, ref="x*sigmoid(x)", order=2)
    >>> result.ok, print(result)

`check_function(function, var=(), *, ref=None, order=1, seed=None, library_dirs=(), given=None,
output=None)` takes the class itself or "path/to/file.py:ClassName" (importing the file runs
it); its inputs are typed as forward declares them (function_inputs.py) and its outputs
sorted into checked and skipped (function_call.py). It runs
torch's gradcheck (and gradgradcheck with order=2) and, to show a mismatch readably, builds
both Jacobians itself (`jacobian.py`): which input, which element, expected vs got. With
`ref`, the forward is compared with the reference expression's values and the backward
with sympy's derivative of it. Likely causes are named (`diagnose.py`). Beside them: the
contract audit (`function_audit.py`), gradients declared with `expect_grad`
(`surrogate.py`), the jvp (`forward_mode.py`) and torch.func (`func_transforms.py`). The result has
`ok`; `as_dict()` is the `--json` document, and its text is the renderer's (`gradcli.check_function`,
gradcli/api.py, returns it with `str()`). The `demo swish` command reuses this function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from .. import words
from ..errors import UsageError, UserCodeError
from ..options import checked_seed
from . import coverage, diagnose
from .fdarbiter import EPS, FLAT_FORWARD, LEAVES_DOMAIN, STEP_ROUNDED, Differences, reason
from .gradchecks import GradcheckVerdict, run_gradcheck
from .jacobian import (ATOL, JACOBIAN_MAX, InputCheck, analytical, backward_of, compare_blocks, flat_output, numerical,
                       output_weights)
from .kinks import OutsideKink, one_sided_kinks, reference_kink_masks, settle_at_kinks
from .second_order import explain_second_order
from .reference import ForwardCheck, reference_checks
from .evaluation import check_order
from .result import FiniteDifferences, finite_difference_checks
from .function_call import FunctionCall, OutputInfo, prepare
from .function_inputs import Inputs
from .userfile import run_user as _run_user
from .function_audit import ContractAudit, audit_contract
from .forward_mode import ForwardModeCheck, check_forward_mode
from .func_transforms import TransformsCheck, check_transforms
from .surrogate import SurrogateCheck, check_declared, declared_gradients


@dataclass
class FunctionResult:
    """What check_function found: `ok`, `verdict()`, `as_dict()` (the `--json` document).

    Described in words once, by the renderer (render/function.py); the public
    `gradcli.check_function` returns it as an api.FunctionCheck, whose `str()` is that text."""

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
    outputs: list[OutputInfo] = field(default_factory=list)
    #: What was seen where no cause could be shown (a nan at order 2, where, which element).
    seen: list[str] = field(default_factory=list)
    #: The w of sum(w * out), whose gradient the second order differentiates.
    output_weights: list[float] | None = None
    audit: ContractAudit | None = None
    surrogates: list[SurrogateCheck] = field(default_factory=list)
    forward_mode: ForwardModeCheck | None = None
    transforms: TransformsCheck | None = None

    def parts(self) -> list[Any]:
        """The contract audit, declared gradients, forward mode and torch.func checks that
        ran: each has `ok`, `lines()` ((text, is a problem) pairs) and `label`."""
        return [p for p in (self.audit, *self.surrogates, self.forward_mode, self.transforms) if p is not None]

    @property
    def checks(self) -> list[FiniteDifferences]:
        """gradcheck (and gradgradcheck at order 2) as uniform records."""
        return list(finite_difference_checks(self.gradcheck, self.gradgradcheck))

    @property
    def ok(self) -> bool:
        return self._agrees and not coverage.nothing_tested(self)

    @property
    def nothing_tested(self) -> bool:
        """Everything compared agreed, but every first-order block compared only zeros."""
        return self._agrees and coverage.nothing_tested(self)

    @property
    def untested(self) -> list[coverage.Untested]:
        """The Jacobian blocks whose compared entries were all 0 (coverage.py)."""
        return coverage.untested(self)

    @property
    def _agrees(self) -> bool:
        checks = [*self.first, *self.second, *self.ref_first, *self.ref_second]
        return (all(c.ok for c in checks) and all(check.verdict.ok is not False for check in self.checks)
                and (self.ref_forward is None or self.ref_forward.ok) and all(p.ok for p in self.parts()))

    def sections(self) -> list[tuple[str, list[InputCheck]]]:
        return [
            ("first derivatives: your backward vs finite differences", self.first),
            ("second derivatives: double backward vs finite differences of your backward", self.second),
            (f"first derivatives: your backward vs sympy's derivative of {self.ref}", self.ref_first),
            (f"second derivatives: double backward vs sympy's of {self.ref}", self.ref_second),
        ]

    def verdict(self) -> str:
        if self.ok:
            done = [check.label for check in self.checks if check.verdict.ok] + (
                [f"the reference {self.ref}"] if self.ref else []) + [p.label for p in self.parts() if p.label]
            untested = coverage.untested_phrase(self)
            but = f", but tested nothing for {untested} (every compared entry is 0)" if untested else ""
            return f"OK{but}: {self.function} agrees with " + ", ".join(done)
        if self.nothing_tested:
            return coverage.not_tested_verdict(self)
        return "PROBLEM: " + (self.causes[0] if self.causes else self.seen[0] if self.seen else _first_problem(self))

    def as_dict(self) -> dict[str, Any]:
        values = {n: words.input_json(v) for n, v in zip(self.inputs.names, self.inputs.values)}
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
            "seed": self.inputs.seed, "arguments": self.inputs.as_dicts(),
            "outputs": [o.as_dict() for o in self.outputs],
            "tested_nothing": [item.as_dict() for item in self.untested],
            "seen": self.seen, "output_weights": self.output_weights or [],
            "contract": self.audit.as_dict() if self.audit else None,
            "expected_gradients": [c.as_dict() for c in self.surrogates],
            "forward_mode": self.forward_mode.as_dict() if self.forward_mode else None,
            "transforms": self.transforms.as_dict() if self.transforms else None,
        }


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
    problems = [text for part in result.parts() for text, bad in part.lines() if bad]
    return problems[0] if problems else "a check failed"


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

    out = _run_user(lambda: fn({n: t.clone().requires_grad_(True) for n, t in tensors.items()}), "forward", cls)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    result = FunctionResult(label, order, inputs, GradcheckVerdict(None), outputs=call.outputs, notes=call.notes())
    result.audit = audit_contract(cls, inputs, order)
    if not result.audit.ok:
        result.gradcheck = GradcheckVerdict(None, message="torch refuses this backward: see the contract error")
        return result
    if declared:
        result.surrogates = _run_user(lambda: check_declared(declared, fn, inputs, seed, library_dirs), "backward", cls)
        result.notes += [f"{n}: finite differences are not used, its gradient is declared by --expect-grad"
                         for n in declared]
        if not tensors:
            result.gradcheck = GradcheckVerdict(None, message="every input's gradient is declared by --expect-grad")
            return result
    size = sum(t.numel() for t in tensors.values())
    small = size <= JACOBIAN_MAX and sum(o.numel() for o in outs) <= JACOBIAN_MAX
    names = list(tensors)

    def positional(*xs: torch.Tensor) -> Any:
        return fn(dict(zip(names, xs)))

    # Second order differentiates sum(w * out), w random: sum(out) is constant for a normaliser.
    weights = output_weights(sum(o.numel() for o in outs), seed) if order == 2 else None
    gradient = backward_of(fn, weights)
    kinks_first, kinks_second, by_reference = {}, {}, False
    if ref is not None and small:
        found, kinks_second, kink_notes = reference_kink_masks(ref, inputs, library_dirs, weights, order,
                                                              sum(o.numel() for o in outs))
        by_reference, kinks_first = found is not None, found or {}
        result.notes += kink_notes
    result.gradcheck = _run_user(lambda: run_gradcheck(positional, list(tensors.values()), seed=seed), "backward", cls)
    if small:
        got, expected = _run_user(lambda: analytical(fn, tensors), "backward", cls), numerical(fn, tensors)
        outside: list[OutsideKink] = []
        if not by_reference:
            kinks_first = _run_user(lambda: one_sided_kinks(fn, tensors, got, expected, outside), "forward", cls)
        result.first = compare_blocks(got, expected, tensors, "out", kinks_first)
        # What was seen at a kink heads the verdict only when it is all that is wrong.
        alone = len(outside) == sum(c.count for c in result.first)
        (result.seen if alone else result.notes).extend(words.outside_kink(k) for k in outside)
        result.causes += diagnose.first_order_causes(result.first, tensors)
        result.gradcheck = settle_at_kinks(result.gradcheck, result.first)
        result.notes += [f"gradcheck: {result.gradcheck.message}"] if result.gradcheck.unreliable_points else []
    else:
        result.notes.append(f"the inputs have {size:,} elements: only gradcheck (fast mode) runs past {JACOBIAN_MAX:,}")
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
            if not by_reference:
                kinks_second = _run_user(lambda: one_sided_kinks(gradient, tensors, got, expected), "backward", cls)
            result.second = compare_blocks(got, expected, tensors, "grad", kinks_second)
            result.gradgradcheck = settle_at_kinks(result.gradgradcheck, result.second)
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
        bad = check.wrong()
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
        bad = check.wrong()
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
    why = reason(diffs, 0, exact)
    if why == FLAT_FORWARD:
        # f(x + h) == f(x - h) is also the vertex of a parabola, where the central difference
        # (0) is right: flat only if the forward does not move over a one-sided step either.
        with torch.no_grad():
            centre = flat_output(fn, tensors)[i].to(torch.float64)
        return why if bool(centre == plus[0]) else ""
    return why


def _analytical_second(gradient: Any, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    try:
        return analytical(gradient, tensors)
    except RuntimeError:
        # Double backward refused (e.g. a backward that is not differentiable): the
        # analytic second derivative is then what autograd can give, nothing.
        probe = gradient(tensors)
        return {n: torch.zeros(probe.numel(), t.numel(), dtype=torch.float64) for n, t in tensors.items()}
