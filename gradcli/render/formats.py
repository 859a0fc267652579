"""The output formats by name: `render(result, "text")`, `render(result, "json")`, ...

One row per format: the name a command's option chooses and the class that renders it
(imported only when used, so `gradcli --help` stays light). A new format is one module
with a `contract.Format` subclass and one row here.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .contract import Format, Output

FORMATS: dict[str, str] = {
    "text": "gradcli.render.text:TextFormat",
    "json": "gradcli.render.trace_json:JsonFormat",
    "dot": "gradcli.render.dot:DotFormat",
}


def format_named(name: str, **options: Any) -> Format:
    module, _, cls = FORMATS[name].partition(":")
    return getattr(import_module(module), cls)(**options)


def render(result: Any, name: str = "text", **options: Any) -> Output:
    """`result` in the format `name` (see FORMATS); options such as width go to the format."""
    return format_named(name, **options).render(result)
