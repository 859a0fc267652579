"""The Python API's results that render themselves: tracing/'s, health/'s and verify/'s plain results,
plus what a Python user or a notebook asks of them (`.to_json()`, `.to_dot()`, `.plot()`,
`str()`, `_repr_html_`).

Those conveniences need the renderers, and the library folders never import the upper half
(only data flows up: tests/project/test_layers.py). So the public `gradcli.trace`, `gradcli.grads`, `gradcli.memory`,
`gradcli.check` and `gradcli.check_function` live here, one layer up, and return a `Trace`, a
`Grads`, a `Check` and a `FunctionCheck`: the same data, the same fields, with the renderers
at hand.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from .comparison.result import CompareResult
from .health.result import GradsResult
from .tracing.trace import TraceResult
from .tracing.trace import trace as _trace
from .verify.expression.result import CheckResult
from .verify.function.result import FunctionResult
from .footprint.result import MemoryResult

R = TypeVar("R")


def _as(cls: type[R], result: Any) -> R:
    """`result`'s fields in the rendering subclass `cls` of its class."""
    return cls(**{f.name: getattr(result, f.name) for f in fields(result)})


class _RenderedByFormat:
    """`str()` and `.to_json()` from the registered text and JSON renderers (render/formats.py),
    exactly what the command prints on a pipe; a notebook shows that text."""

    def to_json(self) -> str:
        """The JSON document the command's `--json` prints (docs/json.md)."""
        from .render.formats import render
        from .render.plain import plain_text

        return plain_text(render(self, "json"))

    def __str__(self) -> str:
        from .render.formats import render
        from .render.plain import plain_text

        return plain_text(render(self, "text"))

    def _repr_html_(self) -> str:
        from .render.plain import text_html

        return text_html(str(self))


@dataclass
class Trace(_RenderedByFormat, TraceResult):
    """A TraceResult that renders itself: `str()` is what `gradcli trace` prints on a pipe."""

    def to_dot(self) -> str:
        """The Graphviz DOT text `gradcli trace --dot -` prints."""
        from .render.formats import render

        return render(self, "dot")  # type: ignore[return-value]

    def _repr_html_(self) -> str:
        from .render.plain import trace_html

        return trace_html(self, str(self))


def trace(target: Any, *inputs: Any, **options: Any) -> Trace:
    """`inspect.trace.trace` (see its docstring for targets, inputs and options), as a Trace."""
    return _as(Trace, _trace(target, *inputs, **options))


@dataclass
class FunctionCheck(_RenderedByFormat, FunctionResult):
    """A FunctionResult that renders itself: `str()` is what `gradcli check-function` prints."""


def check_function(function: Any, *args: Any, **options: Any) -> FunctionCheck:
    """`verify.function.check_function` (see its docstring for the Function, inputs and
    options), as a FunctionCheck."""
    from .verify.function.check import check_function as _check_function

    return _as(FunctionCheck, _check_function(function, *args, **options))


@dataclass
class Grads(_RenderedByFormat, GradsResult):
    """A GradsResult that renders itself: `str()` is what `gradcli grads` prints on a pipe."""

    def to_json(self, depth: int | None = None) -> str:  # type: ignore[override]
        """The JSON document `gradcli grads --json` prints (docs/json.md); `depth`: the
        table folded at another depth than the run's."""
        from .render.formats import render
        from .render.plain import plain_text

        return plain_text(render(self if depth is None else replace(self, depth=depth), "json"))

    def plot(self, path: str, depth: int | None = None) -> str:
        """Draw the `--plot` picture to `path` (.png, .svg or .pdf; needs matplotlib)."""
        from .plot.grads import save_grads

        return str(save_grads(self if depth is None else replace(self, depth=depth), path))


def grads(model: Any, *inputs: Any, loss: Any = None, **named: Any) -> Grads:
    """Gradient health of every parameter of `model` on `inputs`.

    `loss` makes the scalar to differentiate from the output: a callable `loss(output,
    **named values it names)`, an expression in gradcli's language in which `out` is the
    output (`out.logits`, `out[0]`) and `named` values that forward does not take are bound
    (`loss="cross_entropy(out, labels)", labels=...`), or your loss as text
    (`"losses.py:NAME"`, `"torch.nn:CrossEntropyLoss"` with `loss_init=["ignore_index=0"]`);
    default: the output itself, which must then be a scalar. `named` values
    that forward's signature names are passed to it by keyword, except the run's options,
    which are `grads_of`'s: `steps` > 0 also runs that many SGD steps with `lr` on a copy;
    `vanish`, `explode` and `spread` are the thresholds; `strict` makes ZERO, VANISHING and
    EXPLODING fail `ok` too.
    """
    from .health.run import RUN_OPTIONS, grads_of
    from .targets.model import on_python_model

    return _as(Grads, on_python_model(grads_of, model, inputs, named, loss, RUN_OPTIONS))


@dataclass
class Check(_RenderedByFormat, CheckResult):
    """A CheckResult that renders itself: `str()` is what `gradcli check` prints (plain text).

    The text exists once, in render/check.py: a user's `assert result.ok, str(result)` shows
    the same table, causes and verdict as the command on a pipe.
    """


def check(expression: str, var: Any = (), **options: Any) -> Check:
    """`verify.check.check` (see its docstring for the values and options), as a Check."""
    from .verify.expression.check import check as _check

    return _as(Check, _check(expression, var, **options))


@dataclass
class Memory(_RenderedByFormat, MemoryResult):
    """A MemoryResult that renders itself: `str()` is what `gradcli memory` prints on a pipe."""

    def plot(self, path: str, depth: int | None = None) -> str:
        """Draw the `--plot` picture to `path` (.png, .svg or .pdf; needs matplotlib)."""
        from .plot.memory import save_memory

        return str(save_memory(self, path, depth))


def memory(model: Any, *inputs: Any, loss: Any = None, **named: Any) -> Memory:
    """What backward keeps alive when `model` runs on `inputs`.

    `loss` makes the scalar to differentiate from the output: a callable `loss(output)`, or an
    expression in gradcli's language in which `out` is the output and `named` values forward
    does not take are bound; default: the output itself. The run's options (`depth`, `amp`,
    `checkpoint`, `create_graph`, `repeats`) are memory_of's; other `named` values that
    forward's signature names go to forward by keyword.
    """
    from .footprint.run import RUN_OPTIONS, memory_of
    from .targets.model import on_python_model

    return _as(Memory, on_python_model(memory_of, model, inputs, named, loss, RUN_OPTIONS))


@dataclass
class Compare(_RenderedByFormat, CompareResult):
    """A CompareResult that renders itself: `str()` is what `gradcli compare` prints on a pipe."""

    def plot(self, path: str) -> str:
        """Draw the `--plot` picture to `path` (.png, .svg or .pdf; needs matplotlib)."""
        from .plot.compare import save_compare

        return str(save_compare(self, path))


def compare(model: Any, *inputs: Any, loss: Any = None, compile: bool = False, backend: str = "inductor",
            mode: str | None = None, amp: str | None = None, scaler: bool = False, dtype: str | None = None,
            reference: str = "float32", **named: Any) -> Compare:
    """Compare `model`'s gradients on `inputs` in a candidate setup against eager float32 (or
    `reference="float64"`). The candidate: `compile=True` (torch.compile with `backend` and
    `mode`), `amp="bfloat16"|"float16"` (autocast; `scaler=True` for GradScaler's loop),
    `dtype="bfloat16"|"float16"` (weights cast). `loss` is a callable `loss(output)` or an
    expression in gradcli's language in which `out` and the `named` values forward does not
    take are bound; default: the output, which must be a scalar. The model itself (weights,
    `.grad`, buffers) is never changed: both runs use copies."""
    from .comparison.run import compare_of
    from .comparison.setup import Setup
    from .targets.model import on_python_model

    setup = Setup(compile=compile, backend=backend, mode=mode, amp=amp, scaler=scaler, dtype=dtype,  # type: ignore[arg-type]
                  reference=reference)  # type: ignore[arg-type]
    return _as(Compare, on_python_model(compare_of, model, inputs, named, loss, setup=setup))

