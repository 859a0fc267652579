"""torch.func on a Function: which transforms work, why the others do not, and whether they agree.

A Function opts into torch.func (formerly functorch) by what it defines: `setup_context`
(forward without ctx) for grad and jacrev, a `vmap` staticmethod or `generate_vmap_rule =
True` for vmap, and a `jvp` as well for jacfwd. Each transform is run here on the Function
and compared with the plain computation: grad with autograd.grad of the same weighted sum,
jacrev and jacfwd with the Jacobian from plain backward, vmap with a loop over the batch. A
transform that raises is reported with torch's reason in words (`setup_context` missing, no
vmap rule, no jvp); that is a problem only when the Function declared what the transform
needs (it claims support it does not have) or when a transform gives other numbers.
With a vmap rule, gradcheck's check_batched_grad runs too. Where vmap cannot run over the
backward at all (torch has no batching rule for an op in it: NumpyExp_'s in-place numpy gives
`aten::detach`), that is readiness for torch.func, reported with torch's reason, not a wrong
gradient: the gradient itself was checked without vmap. Batched gradients that run and give
other numbers remain a problem.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import torch

from ... import words
from .forward_mode import defines
from ..finite_differences.gradchecks import GradcheckVerdict, run_gradcheck
from ..finite_differences.jacobian import ATOL, JACOBIAN_MAX, RTOL, analytical, flat_output
from .userfile import describe_user_error

TransformName = Literal["grad", "jacrev", "jacfwd", "vmap"]
Fn = Callable[[dict[str, torch.Tensor]], Any]

#: torch's refusals (their text, torch 2.x) and what they mean for the Function.
_REASONS = (
    ("must override the setup_context staticmethod",
     "forward takes ctx: torch.func needs forward(...) without ctx and a setup_context staticmethod"),
    ("does not have vmap support", "no vmap staticmethod and generate_vmap_rule is not True"),
    ("must implement the jvp function", "no jvp staticmethod (forward mode needs one)"),
)
#: What each transform's result is compared with.
_REFERENCE = {"grad": "autograd.grad through your backward", "jacrev": "the Jacobian from your backward",
              "jacfwd": "the Jacobian from your backward", "vmap": "forward run on each batch element"}
#: torch's words (gradcheck.py, torch 2.x) when vmap over the backward could not run at all.
BATCHING_REFUSED = "While computing batched gradients, got: "
#: Offsets of the batch vmap runs over (the inputs moved by each).
BATCH = (0.0, 0.25, -0.5)


@dataclass
class TransformRun:
    name: TransformName
    required: bool  # the Function declared what this transform needs
    supported: bool = True
    agrees: bool | None = None  # None: not run (unsupported) or nothing to compare
    max_abs_err: float | None = None
    why: str | None = None  # why not supported, in words
    error: str | None = None  # torch's (or the user's) exception, first line

    @property
    def ok(self) -> bool:
        return (self.supported or not self.required) and self.agrees is not False

    def as_dict(self) -> dict[str, Any]:
        return {"transform": self.name, "ok": self.ok, "supported": self.supported, "declared": self.required,
                "agrees": self.agrees, "max_abs_err": self.max_abs_err, "why": self.why, "error": self.error}


@dataclass
class TransformsCheck:
    batched: GradcheckVerdict | None  # gradcheck(check_batched_grad=True), with a vmap rule
    runs: list[TransformRun] = field(default_factory=list)
    # Why vmap cannot batch the backward (torch's reason), when that is what stopped the
    # batched gradcheck: readiness, not a wrong gradient (`batched` is then not run)
    vmap_readiness: str | None = None
    label = "torch.func"

    @property
    def ok(self) -> bool:
        return (self.batched is None or self.batched.ok is not False) and all(r.ok for r in self.runs)

    def lines(self) -> list[tuple[str, bool]]:
        """(text, is a problem) per line, for both renderers."""
        supported = [r.name for r in self.runs if r.supported]
        out = [(f"torch.func: supports {', '.join(supported) or 'none of grad, jacrev, jacfwd, vmap'}", False)]
        for r in self.runs:
            if not r.supported:
                claim = " although the Function declares it" if r.required else ""
                out.append((f"torch.func {r.name}: not supported{claim}: {r.why}", not r.ok))
            elif r.agrees is False:
                out.append((f"torch.func {r.name}: differs from {_REFERENCE[r.name]} "
                            f"(max abs err {r.max_abs_err:.3g})", True))
        if self.vmap_readiness is not None:
            out.append((f"vmap readiness: batched gradients (vmap over your backward) cannot run: {self.vmap_readiness}; "
                        "this is readiness for vmap/torch.func, not a wrong gradient (the gradient is checked above)",
                        False))
        elif self.batched is not None:
            out.append((f"gradcheck (batched grad): {words.describe_gradcheck(self.batched)}", self.batched.ok is False))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "batched_gradcheck": self.batched.as_dict() if self.batched else None,
                "vmap_readiness": self.vmap_readiness, "transforms": [r.as_dict() for r in self.runs]}


def check_transforms(cls: type, fn: Fn, tensors: dict[str, torch.Tensor], seed: int) -> TransformsCheck | None:
    """None unless `cls` defines jvp, vmap, setup_context or generate_vmap_rule."""
    setup, jvp = defines(cls, "setup_context"), defines(cls, "jvp")
    vmap_rule = defines(cls, "vmap") or bool(getattr(cls, "generate_vmap_rule", False))
    if not (setup or jvp or vmap_rule) or not tensors or sum(t.numel() for t in tensors.values()) > JACOBIAN_MAX:
        return None
    describe = describe_user_error(cls)
    names = list(tensors)
    xs = [t.detach().to(torch.float64) for t in tensors.values()]

    def flat(*values: torch.Tensor) -> torch.Tensor:
        return flat_output(fn, dict(zip(names, values)))  # the rows `analytical` has, in its order

    result = TransformsCheck(None)
    if vmap_rule:
        try:
            result.batched = run_gradcheck(flat, xs, seed=seed, check_batched_grad=True)
        except (Exception, SystemExit) as err:  # the user's code raised under vmap
            result.batched = GradcheckVerdict(False, message=f"raised {describe(err)}",
                                              points=sum(x.numel() for x in xs))
        _readiness(result)
    rows = analytical(fn, tensors)
    plain_jacobian = torch.cat([rows[n] for n in names], dim=1)
    weights = torch.randn(plain_jacobian.shape[0], dtype=torch.float64,
                          generator=torch.Generator().manual_seed(seed))
    expected = {
        "grad": weights @ plain_jacobian,
        "jacrev": plain_jacobian,
        "jacfwd": plain_jacobian,
        "vmap": torch.stack([flat(*(x + offset for x in xs)).detach() for offset in BATCH]),
    }
    argnums = tuple(range(len(xs)))
    runners: dict[TransformName, Callable[[], torch.Tensor]] = {
        "grad": lambda: _joined(torch.func.grad(lambda *v: flat(*v) @ weights, argnums=argnums)(*xs)),
        "jacrev": lambda: _joined(torch.func.jacrev(flat, argnums=argnums)(*xs), rows=True),
        "jacfwd": lambda: _joined(torch.func.jacfwd(flat, argnums=argnums)(*xs), rows=True),
        "vmap": lambda: torch.func.vmap(flat)(*(torch.stack([x + o for o in BATCH]) for x in xs)),
    }
    # What the Function claims: setup_context for grad and jacrev, a vmap rule for vmap, and a
    # vmap rule with a jvp for jacfwd (it vmaps the jvp).
    declared = {"grad": setup, "jacrev": setup, "jacfwd": jvp and vmap_rule, "vmap": vmap_rule}
    for name, run in runners.items():
        result.runs.append(_run(name, declared[name], run, expected[name], describe))
    return result


def _readiness(result: TransformsCheck) -> None:
    """A batched gradcheck that failed because vmap could not run over the backward is
    readiness (`vmap_readiness`, torch's reason), and the batched check counts as not run."""
    batched = result.batched
    message = (batched.message or "") if batched is not None else ""
    if batched is None or batched.ok is not False or not message.startswith(BATCHING_REFUSED):
        return
    reason = message.removeprefix(BATCHING_REFUSED).strip().rstrip(".")
    result.vmap_readiness = reason
    result.batched = GradcheckVerdict(None, batched.fast_mode, f"vmap cannot batch the backward: {reason}",
                                      batched.points)


def _run(name: TransformName, required: bool, run: Callable[[], torch.Tensor], expected: torch.Tensor,
         describe: Callable[[BaseException], str]) -> TransformRun:
    record = TransformRun(name, required)
    try:
        # torch's first forward-mode call loads decompositions that warn of torch.jit.script's
        # deprecation on stderr: torch's own matter, as gradcheck's warnings are (gradchecks.py).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = run().detach().to(torch.float64)
    except (Exception, SystemExit) as err:
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        why = next((reason for known, reason in _REASONS if known in text), None)
        record.supported, record.error = False, text
        record.why = why or f"it raised {describe(err)}"
        return record
    diff = (got.reshape(expected.shape) - expected).abs() if got.numel() == expected.numel() else None
    if diff is None:
        record.agrees, record.max_abs_err = False, float("inf")
        return record
    record.max_abs_err = float(diff.nan_to_num(nan=float("inf")).max()) if diff.numel() else 0.0
    record.agrees = bool((diff <= ATOL + RTOL * expected.abs()).all())
    return record


def _joined(parts: Any, rows: bool = False) -> torch.Tensor:
    """One tensor from torch.func's per-input tuple: gradients flat and concatenated, or
    Jacobians (outputs x that input's elements) side by side."""
    parts = parts if isinstance(parts, tuple) else (parts,)
    if rows:
        return torch.cat([p.reshape(p.shape[0], -1) for p in parts], dim=1)
    return torch.cat([p.reshape(-1) for p in parts])
