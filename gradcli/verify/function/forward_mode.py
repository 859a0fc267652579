"""Forward mode: a Function's `jvp` against its `backward` and against finite differences.

A Function with a `jvp` has two derivatives written by hand, and nothing in torch makes them
agree: `backward` gives the Jacobian's rows (one per output element), `jvp` its columns (one
per input element, through torch.autograd.forward_ad's dual numbers). Both are built here and
compared entry by entry, each also with central differences, so that a disagreement says
which side is wrong. torch's own check runs too: gradcheck with check_forward_ad=True (and
check_backward_ad=False, so that its verdict is about the jvp alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ... import words
from ..finite_differences.gradchecks import GradcheckVerdict, run_gradcheck
from ..finite_differences.jacobian import JACOBIAN_MAX, InputCheck, analytical, compare_blocks, flat_output, numerical
from .userfile import describe_user_error

Fn = Callable[[dict[str, torch.Tensor]], Any]


def defines(cls: type, name: str) -> bool:
    """Whether `cls` overrides torch.autograd.Function's `name` (jvp, vmap, setup_context)."""
    return getattr(cls, name, None) is not getattr(torch.autograd.Function, name, None)


@dataclass
class ForwardModeCheck:
    """jvp vs finite differences (`against_differences`) and vs backward (`against_backward`),
    per input; `backward_right` says, per input, whether backward agreed with finite differences."""

    gradcheck: GradcheckVerdict
    against_differences: list[InputCheck] = field(default_factory=list)
    against_backward: list[InputCheck] = field(default_factory=list)
    backward_right: dict[str, bool] = field(default_factory=dict)
    error: str | None = None  # the jvp raised: what, and where in the user's file
    label = "forward mode (jvp)"

    @property
    def ok(self) -> bool:
        return (self.error is None and self.gradcheck.ok is not False
                and all(c.ok for c in self.against_differences + self.against_backward))

    def lines(self) -> list[tuple[str, bool]]:
        """(text, is a problem) per line, for both renderers."""
        out = [(f"forward mode (jvp) gradcheck: {words.describe_gradcheck(self.gradcheck)}", self.gradcheck.ok is False)]
        if self.error is not None:
            out.append((f"forward mode: jvp raised {self.error}", True))
        for fd, bw in zip(self.against_differences, self.against_backward):
            out.append((f"forward mode [{fd.name}]: {self.verdict(fd, bw)}", not (fd.ok and bw.ok)))
            shown, reference = (fd.mismatches, "finite differences") if not fd.ok else (bw.mismatches, "backward")
            out += [(f"    {m.element} (= {m.at:.6g}) -> {m.output}: {reference} {m.expected:.6g}, jvp {m.got:.6g}",
                     False) for m in shown]
        return out

    def verdict(self, fd: InputCheck, bw: InputCheck) -> str:
        n = fd.got.numel()
        if fd.ok and bw.ok:
            return f"jvp agrees with backward and with finite differences (max abs err {fd.max_abs_err:.3g})"
        if bw.ok:
            return f"jvp and backward agree, but both differ from finite differences at {fd.count} of {n} entries"
        sides = ("backward agrees with finite differences, the jvp does not" if self.backward_right.get(fd.name)
                 else "the jvp agrees with finite differences, backward does not" if fd.ok
                 else "neither agrees with finite differences")
        return f"jvp and backward disagree at {bw.count} of {n} entries: {sides}"

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "gradcheck": self.gradcheck.as_dict(), "error": self.error,
                "against_finite_differences": [c.as_dict() for c in self.against_differences],
                "against_backward": [c.as_dict() for c in self.against_backward],
                "backward_agrees_with_finite_differences": dict(self.backward_right)}


def check_forward_mode(cls: type, fn: Fn, tensors: dict[str, torch.Tensor], seed: int) -> ForwardModeCheck | None:
    """None unless `cls` defines jvp."""
    if not defines(cls, "jvp") or not tensors:
        return None
    describe = describe_user_error(cls)
    names = list(tensors)

    def positional(*xs: torch.Tensor) -> Any:
        return fn(dict(zip(names, xs)))

    try:
        verdict = run_gradcheck(positional, list(tensors.values()), seed=seed,
                                check_forward_ad=True, check_backward_ad=False, check_undefined_grad=False)
    except (Exception, SystemExit) as err:  # the user's jvp raised something other than a RuntimeError
        verdict = GradcheckVerdict(False, message=f"the jvp raised {describe(err)}",
                                   points=sum(t.numel() for t in tensors.values()))
    result = ForwardModeCheck(verdict)
    size = sum(t.numel() for t in tensors.values())
    if size > JACOBIAN_MAX:
        return result
    try:
        columns = jvp_jacobian(fn, tensors)
    except (Exception, SystemExit) as err:  # the user's jvp raised: a fault of the Function, shown with its line
        result.error = describe(err) + _empty_saved_hint(cls)
        return result
    try:
        rows = analytical(fn, tensors)
    except (Exception, SystemExit):
        return result  # backward raised: the first-order check reports it
    differences = numerical(fn, tensors)
    result.against_differences = compare_blocks(columns, differences, tensors, "out")
    result.against_backward = compare_blocks(columns, rows, tensors, "out")
    result.backward_right = {c.name: c.ok for c in compare_blocks(rows, differences, tensors, "out")}
    return result


def _empty_saved_hint(cls: type) -> str:
    """When the jvp reads ctx.saved_tensors but nothing calls save_for_forward: in forward
    mode saved_tensors holds only what save_for_forward saved (empty here)."""
    import inspect

    try:
        jvp = inspect.getsource(cls.jvp)  # type: ignore[attr-defined]
        saving = "".join(inspect.getsource(getattr(cls, name)) for name in ("forward", "setup_context")
                         if defines(cls, name) or name == "forward")
    except (OSError, TypeError):
        return ""
    if "saved_tensors" in jvp and "save_for_forward" not in saving:
        return ("; the jvp reads ctx.saved_tensors, which forward mode fills only from ctx.save_for_forward, "
                "and nothing calls it")
    return ""


def jvp_jacobian(fn: Fn, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """d out_i / d input_j through forward mode (the user's jvp), one dual pass per input
    element; the other inputs get zero tangents (a jvp may not expect None)."""
    import torch.autograd.forward_ad as fwAD

    base = {n: t.detach().to(torch.float64) for n, t in tensors.items()}
    blocks = {}
    for name, t in base.items():
        columns = []
        for j in range(t.numel()):
            tangent = torch.zeros(t.numel(), dtype=torch.float64)
            tangent[j] = 1.0
            with fwAD.dual_level():
                duals = {n: fwAD.make_dual(v, tangent.reshape(v.shape) if n == name else torch.zeros_like(v))
                         for n, v in base.items()}
                # flattened as `analytical` flattens (cat carries the tangents): the same rows
                columns.append(_tangent(fwAD, flat_output(fn, duals)))
        blocks[name] = torch.stack(columns, dim=1) if columns else torch.zeros(0, 0, dtype=torch.float64)
    return blocks


def _tangent(fwAD: Any, output: torch.Tensor) -> torch.Tensor:
    tangent = fwAD.unpack_dual(output).tangent
    return torch.zeros_like(output, dtype=torch.float64) if tangent is None else tangent.to(torch.float64)
