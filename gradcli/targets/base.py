"""A built computation, whatever it was built from: the one input of the graph walk and passes.

An expression, a Python function and an nn.Module all end the same way once run: named leaf
tensors (variables, or a module's parameters and data inputs), named intermediates, one
output, and for each autograd node where it came from. `Computation` holds exactly that, so
graph/ (walk, passes, flow) and render/ never ask what kind of target they were given;
only `Origin` carries kind-specific detail, and renderers show whichever fields it has.
"""

from __future__ import annotations

import os

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol

from ..errors import Span

TargetKind = Literal["expression", "module", "function"]


@dataclass
class PassError:
    """An exception from torch during one pass, with what it means and how to avoid it
    (graph/explain.py explains torch's message; a code target's explainer, targets/diagnose.py,
    adds the tensor and the lines involved)."""

    type: str
    message: str
    explanation: str
    fix: str | None = None
    details: dict | None = None  # code targets: the tensor and lines involved (see targets/diagnose.py)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an autograd node was created: an expression's span, or user code.

    For code: the module that was running (`path` from the root model, "" for the root
    itself, and its class) and the line of the user's own code that led to the operation."""

    span: Span | None = None
    module: str | None = None
    module_class: str | None = None
    file: str | None = None
    line: int | None = None
    code: str | None = None

    def __str__(self) -> str:
        """A user's line as a report names it: `model.py:12  code`."""
        where = f"{os.path.basename(self.file or '')}:{self.line}"
        return f"{where}  {self.code}" if self.code else where


#: grad_fn -> where it was created (None when nobody knows).
OriginOf = Callable[[Any], "Origin | None"]


@dataclass
class LeafSource:
    """How a leaf was given: the spec text (`randn(3)`, `parameter`) and whether defaulted."""

    spec: str
    defaulted: bool = False


@dataclass
class Computation:
    """A run computation: leaves by name, intermediates by name, the output, node origins."""

    kind: TargetKind
    description: str  # the expression's text, or "examples/mlp.py:MLP"
    leaves: dict[str, Any]  # name -> leaf tensor (requires grad, or data)
    sources: dict[str, LeafSource]  # name -> how the leaf was given
    output: Any  # a Tensor, or a Python number for an expression without variables
    bindings: list[tuple[str, Any]] = field(default_factory=list)  # named intermediates, in order
    seed: int = 0  # the seed random values were drawn with
    drew_random: bool = True  # whether the seed mattered (an expression of fixed values: no)
    origin_of: OriginOf = lambda grad_fn: None
    found: str | None = None  # code: what the target's NAME turned out to be, in words
    # Expressions refuse an output that is not a differentiable scalar before any pass; code
    # lets backward raise, and `explain` says why (the graph was cut, no --loss given).
    strict_output: bool = True
    explain: Callable[[PassError, Any], PassError] | None = None  # (the error, the walked Graph) -> explained
    details: dict[str, Any] = field(default_factory=dict)  # kind-specific facts for renderers
    keep_alive: list[Any] = field(default_factory=list, repr=False)  # the model, hooks' data


class Target(Protocol):
    """Something gradcli can run into a Computation."""

    def build(self, settings: "BuildSettings") -> Computation: ...


@dataclass(frozen=True)
class BuildSettings:
    """How to build: dtype (None keeps a model's own), device, seed, which inputs require grad,
    whether to watch forward for the first non-finite output, and whether to record each
    operation as it is applied (--symbolic: only expressions can, their AST is the formula)."""

    dtype: str | None = None
    device: str = "cpu"
    seed: int | None = None
    wrt: tuple[str, ...] = ()
    watch_forward: bool = False
    record: bool = False
