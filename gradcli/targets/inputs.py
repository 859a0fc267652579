"""Binding a forward's (or a function's) parameters to values: `--var` texts or Python values.

Inputs are matched by name to the signature, as a call would bind them. A parameter with a
numeric default or an int or float annotation given a number (`--var beta=1.5`) is passed as
that Python number, an int where the parameter is an int and the number is written as one; other
values become tensors of the model's dtype, but integers written out for a parameter annotated
`torch.LongTensor` are a long tensor (token ids). A module's tensor inputs are data (no gradient)
unless `--wrt` names them; a function's floating inputs require grad, as an expression's
variables do; integer tensors (token ids, labels) never do. A required parameter without a
value is an exit-2 error that prints the signature and an example.

A model whose forward takes exactly one input (`nn.Sequential.forward(input)`: its name is an
accident of torch's code) takes the one --var that names no parameter of it, whatever the user
called it; `BoundInputs.renamed` records `x → input` for the header. Two unknown names, or a
forward with two inputs, stay an error that prints the signature.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import UsageError, VariableError
from ..interpret.annotations import ArgKind, argument_type
from ..interpret.constructors import Values
from ..interpret.variables import VarSpec, check_total, make_tensor, parse_var, resolve_device, resolve_dtype


@dataclass
class BoundInputs:
    """The call's arguments, and the tensors among them by name (the data leaves)."""

    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, Any] = field(default_factory=dict)
    specs: dict[str, str] = field(default_factory=dict)  # name -> how it was given
    defaulted: list[str] = field(default_factory=list)
    seed: int = 0
    renamed: dict[str, str] = field(default_factory=dict)  # --var name -> the parameter it was bound to
    floated: list[str] = field(default_factory=list)  # integers written, made floating because forward refused int64

    def described(self, found: str) -> str:
        """`found` (what TARGET turned out to be) with the bindings by another name, and the
        written integers made floating, appended."""
        parts = [f"--var {name} → {param}" for name, param in self.renamed.items()]
        parts += [f"--var {name}: the integers written are read as floats (forward refused them as int64)"
                  for name in self.floated]
        return "; ".join([found, *parts])


def bind_inputs(
    fn: Any,
    where: str,
    variables: Sequence[str],
    values: Sequence[Any],
    named_values: dict[str, Any],
    *,
    dtype: str,
    device: str,
    seed: int | None,
    wrt: Sequence[str] = (),
    data_inputs: bool,
    loss_names: Sequence[str] = (),
    probe: Any = None,
) -> BoundInputs:
    """Arguments for `fn` from Python `values` and `--var` texts (`variables`); a --var that
    names no parameter but a variable of --loss (`loss_names`: labels, targets) is made too.

    Integers written for a model's input are int64, as torch.tensor makes them (token ids for an
    Embedding); when `probe` (the model, run once without gradient on a copy of the RNG
    state) refuses them, they are made the model's floating dtype instead (`floated`)."""
    import torch

    signature = _signature(fn, where)
    params = [p for p in signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    names = [p.name for p in params]
    for_loss = {name: v for name, v in named_values.items() if name not in names and name in loss_names}
    named_values = {name: v for name, v in named_values.items() if name not in for_loss}
    try:
        given = signature.bind_partial(*values, **named_values).arguments
    except TypeError as err:
        raise UsageError(f"the inputs do not fit {where}{signature}: {err}") from None
    specs: dict[str, VarSpec] = {}
    parsed = [option if isinstance(option, VarSpec) else parse_var(option) for option in variables]
    renamed = _sole_input(params, given, parsed, loss_names) if data_inputs else {}
    for spec in parsed:
        if spec.name in renamed:
            specs[renamed[spec.name]] = spec
            continue
        if spec.name not in names and spec.name not in loss_names:
            raise VariableError(
                f"--var {spec.name}: {where} has no input '{spec.name}', and --loss does not use it",
                hint=f"its signature: {signature}",
            )
        if spec.name in specs or spec.name in given:
            raise VariableError(f"the input '{spec.name}' is given twice")
        specs[spec.name] = spec
    check_total(specs.values())
    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
    generator = torch.Generator().manual_seed(seed)
    torch_dtype, torch_device = resolve_dtype(dtype), resolve_device(device)
    bound = BoundInputs(seed=seed, renamed=renamed)
    as_named = {param: name for name, param in renamed.items()}  # the user's name is the leaf's
    skipped = False
    for p in params:
        if p.name in given:
            value = given[p.name]
            bound.specs[p.name] = "given from Python"
        elif p.name in specs:
            value = _value(p, specs[p.name], torch_dtype, torch_device, generator, probe is not None)
            bound.specs[p.name] = specs[p.name].text
        elif p.default is not p.empty:
            if p.kind == p.POSITIONAL_ONLY:
                bound.args.append(p.default)  # in its place: a later positional-only input follows it
            else:
                skipped = True  # forward's own default; later inputs go by keyword
            continue
        else:
            raise UsageError(
                f"{where} needs the input '{p.name}': forward{signature}" if data_inputs else
                f"{where} needs the input '{p.name}': {getattr(fn, '__name__', 'fn')}{signature}",
                hint=f"give it with --var, e.g. --var '{p.name}=randn(2, 3)' (the shape {where} expects)",
            )
        if isinstance(value, torch.Tensor):
            name = as_named.get(p.name, p.name)
            value = _leaf(value, wants_grad=(name in wrt) or not data_inputs, given=p.name in given)
            bound.tensors[name] = value
            bound.specs[name] = bound.specs.pop(p.name)
        # Positional while nothing was skipped, as a call would be written (module hooks see
        # positional arguments only, and they record each module's input shapes).
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and not skipped:
            bound.args.append(value)
        else:
            bound.kwargs[p.name] = value
    if probe is not None:
        _float_if_refused(bound, specs, probe, torch_dtype, wrt)
    for name, value in for_loss.items():
        if isinstance(value, torch.Tensor):
            bound.tensors[name] = _leaf(value, wants_grad=name in wrt, given=True)
            bound.specs[name] = "given from Python"
    for name, spec in specs.items():
        if name not in names and name not in as_named:  # for --loss only
            tensor = make_tensor(spec, dtype=torch_dtype, device=torch_device, generator=generator)
            if spec.kind in ("list", "number") and spec.written is Values.INTEGER:
                tensor = tensor.long()  # labels written [0, 2, 1] are class indices: torch.tensor([0, 2, 1]) is int64
            bound.tensors[name] = _leaf(tensor, wants_grad=name in wrt, given=False)
            bound.specs[name] = spec.text
    return bound


def _float_if_refused(bound: BoundInputs, specs: dict[str, VarSpec], probe: Any, dtype: Any, wrt: Sequence[str]) -> None:
    """Make the written-integer inputs `dtype` when forward raises on them as int64."""
    import torch

    written = [name for name, tensor in bound.tensors.items() if tensor.dtype == torch.long
               and _integers_written(specs.get(bound.renamed.get(name, name)))]
    if not written:
        return
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            probe(*bound.args, **bound.kwargs)
        return
    except Exception:  # the user's forward, any error: the floats are tried instead
        pass
    for name in written:
        floated = bound.tensors[name].to(dtype).requires_grad_(name in wrt)
        for index, arg in enumerate(bound.args):
            if arg is bound.tensors[name]:
                bound.args[index] = floated
        for key, arg in bound.kwargs.items():
            if arg is bound.tensors[name]:
                bound.kwargs[key] = floated
        bound.tensors[name] = floated
        bound.floated.append(name)


def _integers_written(spec: VarSpec | None) -> bool:
    return spec is not None and spec.kind in ("list", "number") and spec.written is Values.INTEGER


def _sole_input(params: list[inspect.Parameter], given: dict[str, Any], parsed: list[VarSpec],
                loss_names: Sequence[str]) -> dict[str, str]:
    """{--var name: parameter} when forward takes exactly one input, nothing gives it, and
    exactly one --var names no parameter (preferring one --loss does not read: a loss that
    reads `x` too, `out - x`, still gets it); else {}. A --var naming an optional parameter
    (`--var scale=3` for `forward(self, input, scale=2.0)`) gives that one, not the input."""
    required = [p for p in params if p.default is p.empty]
    names = {p.name for p in params}
    if len(required) != 1 or required[0].name in given or any(spec.name == required[0].name for spec in parsed):
        return {}
    unknown = [spec.name for spec in parsed if spec.name not in names]
    unread = [name for name in unknown if name not in loss_names]
    chosen = unread if unread else unknown
    return {chosen[0]: required[0].name} if len(chosen) == 1 else {}


def _signature(fn: Any, where: str) -> inspect.Signature:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        raise UsageError(f"cannot read the signature of {where}", hint="give it a Python signature (def forward(self, x): ...)") from None


def _value(p: inspect.Parameter, spec: VarSpec, dtype: Any, device: Any, generator: Any, probing: bool) -> Any:
    import torch

    arg = argument_type(p)
    numeric_default = isinstance(p.default, (int, float)) and not isinstance(p.default, bool)
    if spec.kind == "number" and (numeric_default or arg.kind in (ArgKind.INT, ArgKind.FLOAT)):
        # As Python passes it: `repeat=3` for `repeat: int = 1` is the int 3 (range(3.0) fails),
        # `scale=3` for `scale: float = 2.0` the float 3.0, `repeat=2.5` stays 2.5.
        number = spec.args[0]
        return int(number) if arg.kind is ArgKind.INT and spec.written is Values.INTEGER else float(number)
    if spec.kind == "list" and spec.written is Values.INTEGER and arg.kind is ArgKind.INTEGER_TENSOR:
        # Token ids written out (`--var "input_ids=[[464, 3290]]"`) for a parameter annotated
        # torch.LongTensor, as transformers' models annotate input_ids: ids, not floats.
        return torch.tensor(spec.args[0], dtype=torch.long, device=device)
    if probing and _integers_written(spec) and arg.kind in (ArgKind.ANY, ArgKind.TENSOR) and not arg.floating:
        return torch.tensor(spec.args[0], dtype=torch.long, device=device)  # as torch.tensor reads it
    return make_tensor(spec, dtype=dtype, device=device, generator=generator)


def _leaf(tensor: Any, *, wants_grad: bool, given: bool) -> Any:
    """The tensor as a leaf that requires grad exactly when it should."""
    floating = tensor.is_floating_point() or tensor.is_complex()
    if given and (tensor.requires_grad or not wants_grad):
        return tensor  # the caller's own tensor, as the caller made it
    if not floating or not wants_grad:
        return tensor.detach()
    return tensor.detach().requires_grad_(True)
