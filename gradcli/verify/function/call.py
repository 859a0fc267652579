"""How check-function calls a user's Function: which outputs it checks, and on what.

The checks (gradcheck, the Jacobians, the reference) all differentiate one callable of the
floating inputs. This module builds it from the Function as people write it:
- a forward may return a tuple holding non-tensors (an int, an ndarray), integer or bool
  tensors, and outputs marked with `ctx.mark_non_differentiable`: those are skipped and
  listed (`OutputInfo`); every differentiable floating output is checked, or the one
  `--output N` picks. torch's gradcheck skips non-differentiable outputs the same way.
- a forward that modifies an input in place (`ctx.mark_dirty`) cannot take a leaf that
  requires grad, and would overwrite the values finite differences perturb: it gets a clone
  of each input on every call, as gradcheck users do by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import torch

from ...errors import UsageError, UserCodeError
from .inputs import Inputs, make_inputs
from ..finite_differences.jacobian import leaves
from ...exact.points import refuse_unusable
from ...interpret.variables import VarInput, read_vars
from .userfile import check_class, load_function, run_user

#: Why an output is or is not checked.
OutputStatus = Literal["checked", "non-differentiable", "integer", "not a tensor", "not chosen"]


@dataclass(frozen=True)
class OutputInfo:
    """One of forward's outputs: what it is and whether it is checked."""

    index: int
    type: str  # "float64 tensor", "int64 tensor", "int", "ndarray"
    shape: list[int] | None
    status: OutputStatus

    @property
    def checked(self) -> bool:
        return self.status == "checked"

    def __str__(self) -> str:
        shape = "" if self.shape is None else f" of shape {'x'.join(map(str, self.shape))}" if self.shape else " (a scalar)"
        why = {
            "checked": "checked",
            "non-differentiable": "skipped: ctx.mark_non_differentiable",
            "integer": "skipped: integer and bool tensors have no gradient",
            "not a tensor": "skipped: not a tensor",
            "not chosen": "skipped: --output picks another",
        }[self.status]
        return f"output {self.index}: {self.type}{shape}, {why}"

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "type": self.type, "shape": self.shape, "checked": self.checked,
                "status": self.status}


@dataclass
class FunctionCall:
    """A loaded Function, its typed inputs, and `fn(tensors)`: forward on the floating inputs,
    returning the checked outputs only (one tensor, or a tuple of them)."""

    cls: type
    label: str
    inputs: Inputs
    outputs: list[OutputInfo]
    dirty: list[str] = field(default_factory=list)  # inputs forward modifies in place

    @property
    def tensors(self) -> dict[str, torch.Tensor]:
        """The differentiated inputs as float64 tensors (not requiring grad)."""
        return {n: t.detach().to(torch.float64) for n, t in self.inputs.tensors().items()}

    def apply(self, values: Mapping[str, torch.Tensor]) -> Any:
        """forward's whole output, the floating inputs taken from `values`."""
        args = [values[n] if t else v for n, v, t in zip(self.inputs.names, self.inputs.values, self.inputs.tensor)]
        if self.dirty:  # a clone per call: the leaf (and the caller's values) stay as they were
            args = [a.clone() if n in self.dirty and isinstance(a, torch.Tensor) else a
                    for n, a in zip(self.inputs.names, args)]
        return self.cls.apply(*args)  # type: ignore[attr-defined]

    def fn(self, values: Mapping[str, torch.Tensor]) -> Any:
        out = self.apply(values)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        checked = [outs[o.index] for o in self.outputs if o.checked]
        return checked[0] if len(checked) == 1 else tuple(checked)

    def notes(self) -> list[str]:
        if not self.dirty:
            return list(self.inputs.notes)
        names = ", ".join(self.dirty)
        return [*self.inputs.notes, f"forward modifies {names} in place (ctx.mark_dirty): each call gets a clone, "
                "as gradcheck needs"]

    def explain(self, err: UserCodeError) -> UserCodeError:
        """`err` with what gradcli invented, when it invented anything."""
        note = self.inputs.invented_note()
        if note is not None:
            err.hint = note if err.hint is None else f"{err.hint}; {note}"
            err.invented = tuple(self.inputs.defaulted)
        return err


def prepare(
    function: Any, var: VarInput = (), *, seed: int = 0,
    given: Mapping[str, object] | None = None, output: int | None = None,
) -> FunctionCall:
    """Load the Function, make its inputs, run forward once to classify its outputs."""
    if isinstance(function, str):
        cls, label = load_function(function), function
    else:
        cls = check_class(function, getattr(function, "__name__", repr(function)))
        label = cls.__name__
    specs = read_vars(var)  # parsed once, here: the refusal and the inputs read the parsed values
    refuse_unusable(specs.values(), torch.float64)
    inputs = make_inputs(cls, specs, seed, given)
    call = FunctionCall(cls, label, inputs, [])
    if not inputs.tensors():
        data = [f"{n} ({_type(v)})" for n, v in zip(inputs.names, inputs.values)]
        raise UsageError(f"{label}: forward has no floating tensor input to differentiate: "
                         + ", ".join(data),
                         hint="give a float tensor with --var, e.g. --var 'x=randn(4)'; integer and bool "
                              "tensors are data")
    try:
        out, call.dirty = _probe(call)
        call.outputs = classify(out, output)
    except UserCodeError as err:
        raise call.explain(err) from None
    if not any(o.checked for o in call.outputs):
        listed = "; ".join(str(o) for o in call.outputs)
        raise call.explain(UserCodeError(f"{label}: forward returned no differentiable floating tensor ({listed})"))
    _refuse_random(call)
    return call


def _refuse_random(call: FunctionCall) -> None:
    """Finite differences compare forward at x + h and x - h: a forward that draws random
    numbers (dropout, torch.rand) differs between any two calls, and every comparison would
    blame backward (or a kink) for noise. Two calls at the same inputs must agree."""
    with torch.no_grad():
        first, second = (run_user(lambda: call.fn(call.tensors), "forward", call.cls) for _ in range(2))
    firsts = first if isinstance(first, tuple) else (first,)
    seconds = second if isinstance(second, tuple) else (second,)
    for k, (a, b) in enumerate(zip(firsts, seconds)):
        same = torch.isclose(a, b, rtol=1e-10, atol=1e-12, equal_nan=True)
        if bool(same.all()):
            continue
        at = int((~same).reshape(-1).nonzero()[0])
        output = f"output {[o.index for o in call.outputs if o.checked][k]}" if len(firsts) > 1 else "its output"
        raise UsageError(
            f"{call.label}: forward is not deterministic: two calls at the same inputs differ ({output}, element "
            f"{at}: {a.reshape(-1)[at].item():.6g} then {b.reshape(-1)[at].item():.6g}), so finite differences "
            "cannot check its backward",
            hint="it draws random numbers (dropout, torch.rand ...): pass the noise in as an input "
                 "(--var noise=...), or seed the generator inside forward for the check",
        )


def _probe(call: FunctionCall) -> tuple[Any, list[str]]:
    """forward once, on clones (not leaves: an in-place forward may run) of leaves that
    require grad; and which inputs it modified in place (their version counter moved)."""
    fresh = leaves(call.tensors)
    args = [fresh[n].clone() if t else (v.clone() if isinstance(v, torch.Tensor) else v)
            for n, v, t in zip(call.inputs.names, call.inputs.values, call.inputs.tensor)]
    versions = [a._version if isinstance(a, torch.Tensor) else None for a in args]
    out = run_user(lambda: call.cls.apply(*args), "forward", call.cls)  # type: ignore[attr-defined]
    dirty = [n for n, a, v in zip(call.inputs.names, args, versions) if isinstance(a, torch.Tensor) and a._version != v]
    return out, dirty


def classify(out: Any, output: int | None = None) -> list[OutputInfo]:
    """Each output's status; `output` (--output N) keeps only that one, which must be checkable."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    infos = [OutputInfo(i, _type(o), list(o.shape) if isinstance(o, torch.Tensor) else None, _status(o))
             for i, o in enumerate(outs)]
    if output is None:
        return infos
    if not -len(infos) <= output < len(infos):
        raise UsageError(f"--output {output}: forward returns {len(infos)} output{'s' if len(infos) != 1 else ''}",
                         hint=f"give 0 to {len(infos) - 1}" if len(infos) > 1 else
                         "leave --output out: 0 is the only one")
    chosen = infos[output]
    if not chosen.checked:
        raise UsageError(f"--output {output}: {chosen}", hint="pick a differentiable floating output")
    return [o if o.index == chosen.index else OutputInfo(o.index, o.type, o.shape, "not chosen") if o.checked else o
            for o in infos]


def _status(value: Any) -> OutputStatus:
    if not isinstance(value, torch.Tensor):
        return "not a tensor"
    if not (value.is_floating_point() or value.is_complex()):
        return "integer"
    return "checked" if value.requires_grad else "non-differentiable"


def _type(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')} tensor"
    return type(value).__name__
