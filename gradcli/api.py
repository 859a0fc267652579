"""The Python API's trace: inspect/'s plain result, plus what a Python user or a notebook asks
of it (`.to_json()`, `.to_dot()`, `str()`, `_repr_html_`).

Those conveniences need the renderers, and inspect/ never imports the upper half (only
data flows up: tests/test_layers.py). So the public `gradcli.trace` lives here, one layer
up, and returns a `Trace`: the same data, the same fields, with the renderers at hand.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .inspect.trace import TraceResult
from .inspect.trace import trace as _trace


@dataclass
class Trace(TraceResult):
    """A TraceResult that renders itself (as `gradcli trace` prints it)."""

    def to_json(self) -> str:
        """The JSON document `gradcli trace --json` prints."""
        from .render.json import trace_json

        return trace_json(self)

    def to_dot(self) -> str:
        """The Graphviz DOT text `gradcli trace --dot -` prints."""
        from .render.dot import trace_dot

        return trace_dot(self)

    def _repr_html_(self) -> str:
        from .render.notebook import trace_html

        return trace_html(self)

    def __str__(self) -> str:
        from .render.notebook import trace_text

        return trace_text(self)


def trace(target: Any, *inputs: Any, **options: Any) -> Trace:
    """`inspect.trace.trace` (see its docstring for targets, inputs and options), as a Trace."""
    result = _trace(target, *inputs, **options)
    return Trace(**{f.name: getattr(result, f.name) for f in fields(result)})
