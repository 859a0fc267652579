"""The Python API's results that render themselves: tracing/'s, health/'s and verify/'s plain results,
plus what a Python user or a notebook asks of them (`.to_json()`, `.to_dot()`, `.plot()`,
`str()`, `_repr_html_`).

Those conveniences need the renderers, and the library folders never import the upper half
(only data flows up: tests/test_layers.py). So the public `gradcli.trace`, `gradcli.grads`, `gradcli.memory`,
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


def grads(model: Any, *inputs: Any, **options: Any) -> Grads:
    """`health.run.grads` (see its docstring for the model, inputs, loss and options), as a Grads."""
    from .health.run import grads as _grads

    return _as(Grads, _grads(model, *inputs, **options))


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


def memory(model: Any, *inputs: Any, **options: Any) -> Memory:
    """`memory.run.memory` (see its docstring for the model, inputs, loss and options), as a Memory."""
    from .footprint.run import memory as _memory

    return _as(Memory, _memory(model, *inputs, **options))


@dataclass
class Compare(_RenderedByFormat, CompareResult):
    """A CompareResult that renders itself: `str()` is what `gradcli compare` prints on a pipe."""

    def plot(self, path: str) -> str:
        """Draw the `--plot` picture to `path` (.png, .svg or .pdf; needs matplotlib)."""
        from .plot.compare import save_compare

        return str(save_compare(self, path))


def compare(model: Any, *inputs: Any, **options: Any) -> Compare:
    """`compare.run.compare` (see its docstring for the candidate's options: compile, backend,
    mode, amp, scaler, dtype, reference), as a Compare."""
    from .comparison.run import compare as _compare

    return _as(Compare, _compare(model, *inputs, **options))

