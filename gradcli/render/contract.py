"""The renderer contract: a renderer takes a result and RETURNS what to print.

As sympy's printers do (`Printer._print_<Class>`), a format is a class whose
`_render_<ResultClass>` methods each turn one kind of result into output; `render` finds the
method by the result's class (walking its bases) and an unknown class raises instead of
printing something vague. What comes back is either text (JSON, DOT: written as is) or a
list of `Line`s, each one `console.print` call with how it wraps. Renderers never print:
only `gradcli/cli/` does (cli/output.py), so the same output is pinned in tests at a fixed
width and shown on a terminal in colour.

Adding an output format is one module with one `Format` subclass, and one row in
`formats.FORMATS`. Adding a kind of result is one `_render_<Class>` method per format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Union


@dataclass(frozen=True)
class Line:
    """One `console.print` call: a rich renderable (or plain text) and how it is laid out.

    `soft_wrap` leaves a long line whole (a terminal wraps it; a pipe keeps it on one line);
    `crop` cuts it at the width instead (a terminal picture). Text is never read as markup.
    """

    item: Any
    style: str | None = None
    soft_wrap: bool = False
    crop: bool = False


#: What a renderer returns: a text written as it is, or lines for a console.
Output = Union[str, list[Line]]


class Format:
    """A family of renderers, one `_render_<Class>` method per kind of result.

    `width` is the console's width and `color` whether it shows colour; renderers that lay
    text out (tables, wrapped prose) read them, others ignore them.
    """

    name = "format"

    def __init__(self, *, width: int = 100, color: bool = False, **options: Any) -> None:
        self.width = width
        self.color = color
        self.options = options

    def render(self, result: Any) -> Output:
        return self.method_for(result)(result)

    def method_for(self, result: Any) -> Callable[[Any], Output]:
        for cls in type(result).__mro__:
            method = getattr(self, f"_render_{cls.__name__}", None)
            if method is not None:
                return method
        raise TypeError(f"the {self.name} format has no renderer for {type(result).__name__}")
