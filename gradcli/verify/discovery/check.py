"""`check-function` over many Functions at once: one line each, one exit status, for CI.

Two ways to name them: a package, module, file or folder without `:NAME` (every Function it
defines, found by `verify/discovery/find.py`, checked at inferred inputs), or a model target
(`model.py:Net`, as trace and grads take it: every custom Function its forward applied,
found by `applied.py`, checked at the arguments it received). Each is checked by
`check_function` as if named alone. A Function that cannot be checked (its inputs cannot be
inferred, its forward raises) is "could not run", with why: it counts as a failure (exit 1),
as does a module that raised on import, because a CI run that passes while some Functions
went unchecked would say more than it knows; `--skip` leaves a Function out on purpose. A
module that needs a package not installed here (an optional dependency) is a note instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence, get_args

from ...errors import GradcliError, UsageError
from ...options import checked_seed
from ...outcome import Problem, Reported, sentence
from ...words import problem_sentences
from ...exact.evaluation import check_order
from .find import Passed, find_functions, is_discovery_target, skipped_by
from ..function.check import FunctionResult, check_function
from ..function.userfile import source_file

Status = Literal["ok", "wrong", "not tested", "could not run"]
Kind = Literal["package", "module", "model"]


@dataclass
class Entry:
    """One Function's line: its name, verdict and a short reason, and the whole result."""

    name: str
    status: Status
    reason: str
    result: FunctionResult | None = None
    calls: int | None = None  # model targets: how often forward applied it

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "reason": self.reason, "calls": self.calls,
                "result": self.result.as_dict() if self.result is not None else None}


@dataclass
class DiscoveryResult(Reported):
    """Every Function found in a package or applied by a model, each checked (outcome.py's protocol)."""

    target: str
    kind: Kind
    found: str
    order: int
    seed: int
    entries: list[Entry] = field(default_factory=list)
    skipped: list[Passed] = field(default_factory=list)
    unimportable: list[Passed] = field(default_factory=list)  # modules that raised on import
    missing: list[Passed] = field(default_factory=list)  # modules needing a package not installed

    @property
    def notes(self) -> list[str]:
        """Modules not checked because an optional dependency is not installed: said, not failed."""
        return [f"{m.name} not checked: it needs '{m.reason}', which is not installed here (an optional "
                "dependency; install it to check the Functions it defines)" for m in self.missing]

    @property
    def problems(self) -> list[Problem]:
        """A Function that is wrong, tested nothing or could not run; a module that would not import."""
        found = [Problem(entry.status.replace(" ", "-"), entry.name) for entry in self.entries if entry.status != "ok"]
        return found + [Problem("unimportable", m.name, {"error": m.reason}) for m in self.unimportable]

    def counts(self) -> dict[Status, int]:
        statuses: tuple[Status, ...] = ("ok", "wrong", "not tested", "could not run")
        return {status: sum(entry.status == status for entry in self.entries) for status in statuses}

    def verdict(self) -> str:
        counts, total = self.counts(), len(self.entries)
        functions = f"{total} Function{'s' if total != 1 else ''}"
        if self.ok:
            return f"OK: all {functions} agree" if total != 1 else "OK: the 1 Function agrees"
        problems = [f"{n} {status}" for status, n in counts.items() if status != "ok" and n]
        modules = len(self.unimportable)
        if modules:
            problems.append(f"{modules} module{'s' if modules != 1 else ''} could not be imported")
        return f"PROBLEM: {', '.join(problems)} (of {functions}; {counts['ok']} ok)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "kind": self.kind, "found": self.found, "ok": self.ok, "order": self.order,
            "seed": self.seed, "functions": [entry.as_dict() for entry in self.entries],
            "skipped": [{"name": s.name, "reason": s.reason} for s in self.skipped],
            "unimportable": [{"module": m.name, "error": m.reason} for m in self.unimportable],
            "missing_dependencies": [{"module": m.name, "dependency": m.reason} for m in self.missing],
            "notes": self.notes,
            "counts": {status.replace(" ", "_"): n for status, n in self.counts().items()},
            "verdict": self.verdict(),
            "problems": problem_sentences(self.problems),
        }


def check_discovered(
    target: str,
    variables: Sequence[str] = (),
    *,
    order: int = 1,
    seed: int | None = None,
    ref: str | None = None,
    init: Sequence[str] = (),
    skip: Sequence[str] = (),
    output: int | None = None,
    expect_grad: Sequence[str] = (),
) -> DiscoveryResult | None:
    """Check every Function `target` defines or applies; None when `target` names one
    Function class (check_function checks it alone, with its --var, --ref ...)."""
    check_order(order)
    seed = 0 if seed is None else checked_seed(seed)
    one = [name for name, given in (("--ref", ref is not None), ("--output", output is not None),
                                     ("--expect-grad", bool(expect_grad))) if given]
    if is_discovery_target(target):
        if variables or init or one:
            named = ", ".join(["--var"] * bool(variables) + ["--init"] * bool(init) + one)
            raise UsageError(f"'{target}' names many Functions: {named} name one Function's inputs or outputs",
                             hint="check one Function alone as PATH.py:NAME (or package.module:NAME) with them")
        return _check_package(target, order, seed, skip)
    from ...targets.load import load_object
    from .applied import is_model
    from ..function.userfile import is_function_class

    obj, where = load_object(target)
    if is_function_class(obj) or not is_model(obj):
        if init or skip:
            raise UsageError(f"--init and --skip apply to a model or a package, and {where} is not one",
                             hint="drop them to check this one Function")
        return None
    if one:
        raise UsageError(f"{where} is a model: {', '.join(one)} name one Function's reference, output or gradient",
                         hint="check that Function alone with them")
    return _check_model(obj, target, where, variables, order, seed, init, skip)


def _check_package(target: str, order: int, seed: int, skip: Sequence[str]) -> DiscoveryResult:
    found = find_functions(target, skip)
    result = DiscoveryResult(target, found.kind, found.description, order, seed, skipped=found.skipped,
                             unimportable=found.unimportable, missing=found.missing)
    result.entries += [_check(f.name, f.cls, order, seed) for f in found.functions]
    if not result.entries and not result.unimportable:
        raise UsageError(f"{found.description} defines no torch.autograd.Function to check"
                         + (f" ({len(found.skipped)} skipped)" if found.skipped else ""),
                         hint="name the package or module that defines them")
    return result


def _check_model(obj: Any, target: str, where: str, variables: Sequence[str], order: int, seed: int,
                 init: Sequence[str], skip: Sequence[str]) -> DiscoveryResult:
    from .applied import applied_functions, bind_received

    applied = applied_functions(obj, where, variables, init=init, seed=seed)
    result = DiscoveryResult(target, "model", applied.found, order, seed, skipped=applied.skipped)
    for application in applied.applications:
        cls = application.cls
        name = _name(cls, target)
        if skipped_by(name, cls, skip):
            result.skipped.append(Passed(name, "--skip"))
            continue
        try:
            given = bind_received(cls, application)
        except GradcliError as err:
            result.entries.append(Entry(name, "could not run", err.message, calls=application.calls))
            continue
        entry = _check(name, cls, order, seed, given)
        entry.calls = application.calls
        result.entries.append(entry)
    if not result.entries:
        raise UsageError(f"the forward of {where} applied no custom torch.autograd.Function to check"
                         + (f" ({len(result.skipped)} skipped)" if result.skipped else ""),
                         hint="check-function on a model checks the Functions its forward calls through .apply")
    return result


def _check(name: str, cls: type, order: int, seed: int, given: dict[str, Any] | None = None) -> Entry:
    try:
        result = check_function(cls, order=order, seed=seed, given=given)
    except GradcliError as err:
        invented = getattr(err, "invented", ())
        if not invented:
            return Entry(name, "could not run", err.message)
        # --var is refused for many Functions: real values are given to the one alone.
        names = ", ".join(invented)
        return Entry(name, "could not run", f"{err.message.splitlines()[0]} (gradcli invented {names}: give "
                                            "real values to it alone, with --var or check_function(given=...))")
    if result.ok:
        return Entry(name, "ok", "agrees with " + ", ".join(check.label for check in result.checks), result)
    if result.nothing_tested:  # everything compared agreed, but it was only zeros
        return Entry(name, "not tested", result.verdict().removeprefix("NOT TESTED: "), result)
    return Entry(name, "wrong", result.verdict().removeprefix("PROBLEM: "), result)


def _name(cls: type, target: str) -> str:
    """How to check `cls` alone: by its file when the model was given as a file (relative to
    the current folder when inside it), else by its module."""
    from pathlib import Path

    if target.split(":")[0].endswith(".py"):
        file = source_file(cls)
        if file is not None:
            file = file.resolve()
            shown = file.relative_to(Path.cwd()) if file.is_relative_to(Path.cwd()) else file
            return f"{shown.as_posix()}:{cls.__qualname__}"
    return f"{cls.__module__}:{cls.__qualname__}"


@sentence(*(status.replace(" ", "-") for status in get_args(Status) if status != "ok"))
def _function_status(p: Problem) -> str:
    return f"{p.subject}: {p.kind.replace('-', ' ')}"


@sentence("unimportable")
def _unimportable(p: Problem) -> str:
    return f"{p.subject} could not be imported: {p.detail['error']}"
