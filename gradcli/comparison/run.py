"""`compare(model, *inputs, loss=..., compile=True, amp="bfloat16")`: the candidate setup's
gradients against the eager reference's, parameter by parameter, and where and why they part.

The healthy path is two runs on copies of the model (reference, candidate) and one pass over
the gradients, as a hand-written check would do. Only when a parameter leaves tolerance do
the extra runs happen: both sides again with every module watched (where it starts), and the
reruns that make the evidence of causes.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..errors import GradcliError, UsageError
from ..targets.load import user_error
from ..targets.model import python_loss
from .gradients import Flag, Tolerance, compare_gradients
from .result import CompareResult
from .setup import Setup
from .side import How, LossFn, SideRun, computing_modules, run_side

#: Tolerance.factor for compare, from the healthy models of the README's "compare's tolerances".
FACTOR = Tolerance.factor
#: A gradient is judged relative to at least this share of the size a gradient of its
#: parameter's numel has in this model (the model's root-mean-square gradient element × √numel):
#: below it, the reference is rounding noise around an exact zero (README, "compare's tolerances").
FLOOR_SHARE = 1e-1
#: The widest tolerance: √n grows without bound over long reductions (a ResNet's first
#: convolution sums 4,096 terms: 4.0 in bfloat16), and a tolerance near 1 accepts a gradient of
#: zero. Half the gradient's norm is the most a comparison can allow and still say something.
MAX_TOLERANCE = 0.5
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def compare(model: torch.nn.Module, *inputs: Any, loss: LossFn | str | None = None, compile: bool = False,
            backend: str = "inductor", mode: str | None = None, amp: str | None = None, scaler: bool = False,
            dtype: str | None = None, reference: str = "float32", **named: Any) -> CompareResult:
    """Compare `model`'s gradients on `inputs` in a candidate setup against eager float32 (or
    `reference="float64"`). The candidate: `compile=True` (torch.compile with `backend` and
    `mode`), `amp="bfloat16"|"float16"` (autocast; `scaler=True` for GradScaler's loop),
    `dtype="bfloat16"|"float16"` (weights cast). `loss` is a callable `loss(output)` or an
    expression in gradcli's language in which `out` and the `named` values forward does not
    take are bound; default: the output, which must be a scalar. The model itself (weights,
    `.grad`, buffers) is never changed: both runs use copies."""
    setup = Setup(compile=compile, backend=backend, mode=mode, amp=amp, scaler=scaler, dtype=dtype,  # type: ignore[arg-type]
                  reference=reference)  # type: ignore[arg-type]
    kwargs, loss_fn, _ = python_loss(model, inputs, named, loss)
    return compare_of(model, tuple(inputs), kwargs, loss_fn, setup)


def compare_of(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: LossFn, setup: Setup,
               *, factor: float = FACTOR) -> CompareResult:
    """compare with forward's arguments given as args and kwargs (the CLI binds them by name)."""
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"compare needs a torch.nn.Module, not {type(model).__name__}")
    if next(model.parameters(), None) is None:
        raise UsageError(f"{type(model).__name__} has no parameters: compare judges a model's parameter gradients")
    setup.check_machine()
    with torch.random.fork_rng(devices=[]):
        runs = Runs(model, args, kwargs, loss_fn, torch.random.get_rng_state(), setup, factor)
        reference = runs.reference(sized=True)
        try:
            candidate = runs.candidate()
        except GradcliError:
            raise
        except Exception as err:  # the reference ran: torch cannot run this model in this setup
            raise user_error(f"the candidate ({setup.describe()}) raised, while the reference ran:", err) from None
        runs.sizes = reference.sizes
        if candidate.scaler_steps:
            runs.settled = candidate.scaler_steps[-1].scale
        parameters = runs.judge(reference, candidate)
        result = CompareResult(
            type(model).__name__, setup, parameters, runs.module_of, {path: type(m).__name__ for path, m in model.named_modules()},
            reference.loss, candidate.loss, factor, scaler_steps=candidate.scaler_steps,
        )
        if setup.scaler and candidate.scaler_steps:
            settled = candidate.scaler_steps[-1]
            if settled.skipped:
                result.notes.append(f"GradScaler skipped all {len(candidate.scaler_steps)} steps (scale down to {settled.scale:g})")
        if not result.ok:
            from .causes import find_causes
            from .locate import locate

            watched_ref, watched_cand = runs.reference(watch=True), runs.candidate(watch=True)
            result.first_divergence = locate(watched_ref, watched_cand, runs.module_tolerance, parameters, runs.module_of)
            result.causes = find_causes(runs, result, watched_ref, watched_cand)
    return result


@dataclass
class Runs:
    """The model, the batch and the generator state both sides start from: any side, rerun."""

    model: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    loss_fn: LossFn
    rng_state: torch.Tensor
    setup: Setup
    factor: float
    sizes: dict[str, int] = field(default_factory=dict)
    module_of: dict[str, str] = field(default_factory=dict)  # parameter name -> module path
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    settled: float | None = None  # the scale GradScaler settled on, once known
    _order: list[str] | None = None  # computing modules in forward order (from `sizes`)

    def __post_init__(self) -> None:
        for name, p in self.model.named_parameters():
            self.module_of[name] = name.rpartition(".")[0]
            self.shapes[name] = tuple(p.shape)

    @property
    def reference_how(self) -> How:
        return How(cast=torch.float64) if self.setup.reference == "float64" else How()

    @property
    def candidate_how(self) -> How:
        s = self.setup
        return How(cast=DTYPES[s.dtype] if s.dtype else None, amp=DTYPES[s.amp] if s.amp else None, scaler=s.scaler,
                   compile=s.compile, backend=s.backend, mode=s.mode)

    def reference(self, how: How | None = None, *, watch: bool = False, sized: bool = False,
                  rng_state: torch.Tensor | None = None) -> SideRun:
        return self.run(how or self.reference_how, watch=watch, record=watch, sized=sized, rng_state=rng_state)

    def candidate(self, how: How | None = None, *, watch: bool = False) -> SideRun:
        how = how or self.candidate_how
        if watch and how.scaler:  # watched at the scale GradScaler settled on, once
            how = replace(how, scaler=False, scale=self._settled_scale())
        return self.run(how, watch=watch)

    def run(self, how: How, *, watch: bool = False, record: bool = False, sized: bool = False,
            rng_state: torch.Tensor | None = None) -> SideRun:
        state = self.rng_state if rng_state is None else rng_state
        return run_side(self.model, self.args, self.kwargs, self.loss_fn, how, state, watch=watch, record=record, sized=sized)

    def _settled_scale(self) -> float:
        if self.settled is None:
            steps = self.candidate().scaler_steps
            self.settled = steps[-1].scale if steps else 1.0
        return self.settled

    # -- tolerances ---------------------------------------------------------------------------
    def reduction(self, name: str) -> int:
        """How many terms each element of a parameter's gradient sums: its module's output
        size over the parameter's leading dimension (a Linear's batch, a Conv's batch × pixels)."""
        path = self.module_of[name]
        while path not in self.sizes and path:  # a layer its parent calls functionally (MHA's out_proj)
            path = path.rpartition(".")[0]
        size = self.sizes.get(path, 1)
        lead = self.shapes[name][0] if self.shapes[name] else 1
        return max(size // max(lead, 1), 1)

    def judge(self, reference: SideRun, candidate: SideRun) -> list:
        """Every parameter's comparison, with its tolerance and floor (from `reference`)."""
        grads = [g for g in reference.grads.values() if g is not None]
        total = sum(g.numel() for g in grads)
        square = sum(float(torch.linalg.vector_norm(g.double())) ** 2 for g in grads)
        rms = (square / total) ** 0.5 if total else 0.0
        floors = {n: FLOOR_SHARE * rms * self.numel(n) ** 0.5 for n in reference.grads}
        compared = compare_gradients(reference.grads, candidate.grads, {n: self.tolerance(n) for n in reference.grads}, floors)
        if self.setup.precision == "float32":  # zeros a float32 candidate has are no underflow (other dropout masks)
            for p in compared:
                if Flag.UNDERFLOW in p.flags:
                    p.flags = [Flag.DIFFERS if f is Flag.UNDERFLOW else f for f in p.flags if f is not Flag.DIFFERS]
        return compared

    def numel(self, name: str) -> int:
        numel = 1
        for d in self.shapes[name]:
            numel *= d
        return numel

    def depth(self, name: str) -> int:
        """How many computing modules the run passes through: every gradient carries the
        rounding of each, forward (its activations were made by all the layers before it)
        and backward (its incoming gradient by all the layers after). Measured: resnet18's
        head under inductor carried the forward's error of 60 modules, 1.5x over a tolerance
        that counted only the modules behind it in backward."""
        if self._order is None:
            computing = {path for path, _ in computing_modules(self.model)}
            self._order = [path for path in self.sizes if path in computing]
        return max(len(self._order), 1)

    def tolerance(self, name: str) -> float:
        n = self.reduction(name) * self.depth(name)
        return min(Tolerance(DTYPES[self.setup.precision], n, self.factor).value, MAX_TOLERANCE)

    def module_tolerance(self, path: str) -> float:
        """A module's own parameters' tolerance; a module without any (ReLU, Dropout) gets the
        model's loosest, since what it passes on feeds the layers that have them."""
        own = [self.tolerance(n) for n, m in self.module_of.items() if m == path]
        return max(own or [self.tolerance(n) for n in self.module_of])
