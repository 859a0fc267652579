"""What `check-function` found about a torch.autograd.Function: the result as data.

Each comparison the check made (verify/function/check.py runs them) is a field; `checks` and `parts()`
enumerate them one way, `ok` and `verdict()` decide from them, and `as_dict()` is the
`--json` document. The words a person reads are the renderer's (render/function.py), once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ... import words
from ...outcome import Problem, Reported, sentence
from . import coverage
from .forward_mode import ForwardModeCheck
from .transforms import TransformsCheck
from .audit import ContractAudit
from .call import OutputInfo
from .inputs import Inputs
from ..finite_differences.gradchecks import GradcheckVerdict
from ..finite_differences.jacobian import InputCheck
from .reference import ForwardCheck
from ..expression.result import FiniteDifferences, finite_difference_checks
from .surrogate import SurrogateCheck


@dataclass
class FunctionResult(Reported):
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
    causes: list[Any] = field(default_factory=list)  # causes/cause.py Cause: what backward got wrong
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
    def problems(self) -> list[Problem]:
        """What makes the check fail, as records: the reference's forward, each Jacobian block
        that disagrees, a failed gradcheck, a failed part (contract, declared gradient, forward
        mode, torch.func), or a check that tested nothing. `ok` is `not problems`."""
        found = []
        if self.ref_forward is not None and not self.ref_forward.ok:
            found.append(Problem("forward-differs", self.ref or ""))
        for title, checks in self.sections():
            found += [Problem("jacobian-differs", c.name, {"section": title}) for c in checks if not c.ok]
        found += [Problem("finite-differences-failed", check.label, {"message": check.verdict.message})
                  for check in self.checks if check.verdict.ok is False]
        for part in self.parts():
            if not part.ok:
                bad = [text for text, is_problem in part.lines() if is_problem]
                found.append(Problem("check-failed", part.label or type(part).__name__,
                                     {"message": bad[0] if bad else ""}))
        if not found and coverage.nothing_tested(self):
            found.append(Problem("tested-nothing", self.function))
        return found

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
        return all(p.kind == "tested-nothing" for p in self.problems)

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
        return "PROBLEM: " + (self.causes[0].summary if self.causes else self.seen[0] if self.seen else _first_problem(self))

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
            "causes": [c.as_dict() for c in self.causes], "notes": self.notes, "verdict": self.verdict(),
            "problems": words.problem_sentences(self.problems), "seed": self.inputs.seed, "arguments": self.inputs.as_dicts(),
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


@sentence("forward-differs")
def _forward_differs(p: Problem) -> str:
    return f"the forward differs from {p.subject}"


@sentence("jacobian-differs")
def _jacobian_differs(p: Problem) -> str:
    return f"{p.detail['section']} disagree for {p.subject}"


@sentence("check-failed")
def _check_failed(p: Problem) -> str:
    return f"{p.subject}: {p.detail['message']}" if p.detail.get("message") else f"{p.subject} failed"


@sentence("tested-nothing")
def _tested_nothing(p: Problem) -> str:
    return "every compared entry is 0: the check tested nothing"
