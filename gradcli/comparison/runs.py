"""The runs of one comparison: the model, the batch and the generator state both sides start
from, so that any side can be rerun (the healthy pair, the watched pair, the reruns behind
causes.py), and the tolerances each parameter is judged by."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from .gradients import Flag, Tolerance, compare_gradients
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
