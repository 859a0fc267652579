"""The user's model as the model commands take it: grads, compare, memory and the distributed runs.

From the command line (`model_run`, on the one ModelSpec record of the model options: spec.py):
TARGET loaded, constructed with `--init` under one seed (`made`, which trace's CodeTarget uses
too), converted to `--dtype`/`--device`, fed its `--var` inputs by forward's signature, and its
output reduced by `--loss` (an expression, `losses.py:NAME`, or an `nn.Module` loss with
`--loss-init`: targets/loss.py). From Python (`python_loss`): the values forward's signature names go to
forward, the rest to the loss. Each command then runs the model its own way; what a TARGET may
be, and how the run is seeded and fed, is decided here once.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TypeVar

import torch

from ..errors import UsageError
from .code import tag_loss
from .construct import made, seeded
from .inputs import bind_inputs
from .load import load_object, users_code
from .loss import Loss, as_loss
from .outputs import name_outputs, reduce_output
from .spec import ModelSpec

LossFn = Callable[[Any], Any]


@dataclass
class ModelRun:
    """A model made from TARGET, forward's arguments, and how its output becomes the loss."""

    model: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    tensors: dict[str, torch.Tensor]  # the bound --var tensors by name (the loss reads them too)
    loss: Loss | None
    where: str
    found: str
    seed: int

    def loss_of(self, output: Any, tensors: dict[str, torch.Tensor] | None = None) -> Any:
        """The loss of forward's `output` (`tensors`: the values the loss reads, default the run's)."""
        outputs = name_outputs(output, self.where)
        tensors = self.tensors if tensors is None else tensors
        if self.loss is None:
            return reduce_output(outputs, tensors, None)[0]
        return self.loss.apply(output, outputs, tensors)[0]

    def tagged_loss_of(self, output: Any) -> Any:
        """loss_of, with the nodes a --loss expression built given their place in its text (the
        commands that show nodes by line: memory, as trace does)."""
        value = self.loss_of(output)
        given = self.loss.given if self.loss is not None else None
        if isinstance(given, str) and getattr(value, "grad_fn", None) is not None:
            tag_loss(value.grad_fn, given, forward=[t.grad_fn for t in name_outputs(output, self.where).values()])
        return value


Result = TypeVar("Result")


def on_model(judge: Callable[..., Result], spec: ModelSpec, *, purpose: str, tag_loss: bool = False, **options: Any) -> Result:
    """THE model run of the model-level commands (grads, memory, compare, the ranks' own one-
    process run): TARGET loaded and made (--init), fed (--var), its loss (--loss, --loss-init),
    all inside one seeded run (--seed) on --device, then `judge(model, args, kwargs, loss_fn,
    **options)` run there as the user's code (what it raises is the user's). The result comes
    back stamped with the target, what it turned out to be, and the seed.

    A new model-level command is its `judge` (grads_of, memory_of, compare_of) and a `purpose`
    that ends the refusal of a target that is no model ("grads judges a model's parameters").
    """
    with model_run(spec, purpose=purpose) as run:
        with users_code(run.where):
            result = judge(run.model, run.args, run.kwargs, run.tagged_loss_of if tag_loss else run.loss_of, **options)
    result.target, result.found, result.seed = run.where, run.found, run.seed  # type: ignore[attr-defined]
    return result


@contextlib.contextmanager
def model_run(spec: ModelSpec, *, purpose: str) -> Iterator[ModelRun]:
    """TARGET made and fed, inside one seeded copy of torch's RNG state.

    The seed drives the initialisation, the random inputs and forward's own randomness
    (dropout) when the command runs the model inside this block, so `--seed` repeats the whole
    run. `purpose` ends the refusal of a target that is no model with parameters ("grads judges
    a model's parameters").
    """
    obj, where = load_object(spec.target)
    loss = as_loss(spec.loss, spec.loss_init, spec.library_dirs)
    with seeded(spec.seed) as seed:
        callee = made(obj, where, spec.init, dtype=spec.dtype, device=spec.device)
        model = callee.model
        if model is None:
            raise UsageError(f"{where} is {callee.found}: {purpose}",
                             hint="name an nn.Module subclass, a factory returning one, or a module instance")
        if next(model.parameters(), None) is None:  # "OK: all 0 parameters ..." would pass CI on nothing
            raise UsageError(f"{where} is {callee.found}, which has no parameters: {purpose}",
                             hint="name the model that holds the layers (trace follows the gradient of any callable)")
        inputs = bind_inputs(
            callee.signature_of, where, spec.var, (), {}, dtype=spec.dtype or model_dtype(model),
            device=spec.device, seed=seed, data_inputs=True, loss_names=loss.names() if loss else (), probe=callee.run,
        )
        yield ModelRun(model, tuple(inputs.args), inputs.kwargs, inputs.tensors, loss, where,
                       inputs.described(callee.found), seed)


def refuse_untrained(model: torch.nn.Module, purpose: str, hint: str | None = None) -> None:
    """A gradient command's refusal of a model with no parameter, or none it trains: "OK: all 0
    parameters" would pass a CI run on nothing. `purpose` ends it, as on_model's."""
    name = type(model).__name__
    params = list(model.parameters())
    if not params:
        raise UsageError(f"{name} has no parameters: {purpose}", hint=hint)
    if not any(p.requires_grad for p in params):
        raise UsageError(f"every parameter of {name} is frozen (requires_grad=False): {purpose}",
                         hint="unfreeze the layers you mean to train")

def on_python_model(judge: Callable[..., Result], model: Any, inputs: tuple[Any, ...], named: dict[str, Any],
                    loss: LossFn | str | None, options: Sequence[str] = (), **fixed: Any) -> Result:
    """THE model run from Python (gradcli.grads, .memory, .compare): forward's keyword values,
    the loss and the command's `options` split from one call's keywords (python_loss), then
    `judge(model, inputs, kwargs, loss_fn, **options, **fixed)`, as on_model runs it."""
    kwargs, loss_fn, chosen = python_loss(model, inputs, named, loss, options)
    return judge(model, tuple(inputs), kwargs, loss_fn, **chosen, **fixed)


def python_loss(model: Any, inputs: tuple[Any, ...], named: dict[str, Any], loss: LossFn | str | None,
                options: Sequence[str] = ()) -> tuple[dict[str, Any], LossFn, dict[str, Any]]:
    """From Python: forward's keyword values, the loss of its output, and the command's own
    options, all from one call's keywords (`named`).

    `loss` is a callable `loss(output, **named values it names)`, an expression in gradcli's
    language (`out` and the values forward does not take bound), your loss as text
    (`"losses.py:NAME"`, `"torch.nn:CrossEntropyLoss"` with the keyword `loss_init`), or None:
    the output is the loss. The keywords named in `options` are the command's (`steps`,
    `depth`, ...) and come back apart. Any other keyword neither forward nor the loss reads is
    refused, as an unused --var is.
    """
    named = dict(named)
    chosen = {name: named.pop(name) for name in options if name in named}
    loss_init = tuple(named.pop("loss_init", ()))
    kwargs, for_loss = _split_named(model, named)
    if loss is None:
        if for_loss:
            raise UsageError(f"forward takes no input '{next(iter(for_loss))}'", hint="values for the loss need loss=")
        return kwargs, _output_is_loss, chosen
    made = as_loss(loss, loss_init)
    assert made is not None
    takes_all = made.is_code and _takes_all(made.callable())
    unread = [name for name in for_loss if name not in made.names() and not takes_all]
    if unread:
        raise UsageError(f"forward takes no input '{unread[0]}', and the loss does not use it",
                         hint="seed with torch.manual_seed before the call; the options are " + ", ".join(options))
    # The loss reads forward's inputs too (ids for a shifted loss), by forward's names.
    return kwargs, _ModelLoss(made, {**_by_name(model, inputs, kwargs), **for_loss}), chosen


class _ModelLoss:
    """The loss as --loss gives it (targets/loss.py): an expression with `out` and the named
    values bound, or the user's callable `loss(out, **values it names)`."""

    def __init__(self, loss: Loss, values: dict[str, Any]) -> None:
        self.loss, self.values = loss, values

    def __call__(self, output: Any) -> Any:
        return self.loss.apply(output, name_outputs(output, "the model"), self.values)[0]


def _output_is_loss(output: Any) -> Any:
    return output


def _split_named(model: Any, named: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keyword values for forward, and the rest (for the loss)."""
    if not named:
        return {}, {}
    try:
        accepted = set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError, AttributeError):
        accepted = set()
    return ({k: v for k, v in named.items() if k in accepted}, {k: v for k, v in named.items() if k not in accepted})


def _by_name(model: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        bound = inspect.signature(model.forward).bind_partial(*inputs, **kwargs).arguments
    except (TypeError, ValueError):
        return {}
    return {name: value for name, value in bound.items() if isinstance(value, torch.Tensor)}


def _takes_all(fn: Any) -> bool:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        return any(p.kind == p.VAR_KEYWORD for p in inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return False


def scalar_loss(value: Any) -> torch.Tensor:
    """The loss as one floating-point number; anything else is refused (exit 2)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
        return value.reshape(())
    if isinstance(value, torch.Tensor):
        what = f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    else:
        what = f"a {type(value).__name__}"
    raise UsageError(
        f"the loss must be a floating-point scalar, and it is {what}",
        hint='reduce the output to one number: --loss "out.pow(2).mean()" (in Python: loss=lambda out: ...)',
    )


def model_dtype(model: Any) -> str:
    """The dtype of the model's first floating parameter or buffer (its inputs are made in it)."""
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return str(tensor.dtype).removeprefix("torch.")
    return "float32"


@contextlib.contextmanager
def restored_buffers(model: torch.nn.Module) -> Iterator[None]:
    """Put back every buffer forward changed in place (BatchNorm's running statistics): the
    runs of these commands are measurements, not training steps."""
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)
