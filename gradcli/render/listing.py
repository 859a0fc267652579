"""`gradcli list`: the library and the operations as data, then as a table or JSON."""

from __future__ import annotations

from typing import Any

from ..language.ops import OPS_LIST
from ..language.library import Library
from .console import make_console, print_json


def listing_data(library: Library) -> dict[str, Any]:
    functions = [
        {
            "name": f.name,
            "signature": f.signature(),
            "doc": f.doc,
            "source": f.source,
            "link": f.link,
            "body": f.body_text,
            "derivative": f.derivative_text,
            "domain": list(f.domain),
            "builtin": f.builtin,
            "file": str(f.path) if f.path else None,
        }
        for f in sorted(library.functions.values(), key=lambda f: f.name)
    ]
    operations = [
        {"name": op.name, "signature": op.signature(), "doc": op.doc, "method": op.method, "kind": op.kind}
        for op in OPS_LIST
    ]
    return {"functions": functions, "operations": operations}


def render_listing(data: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print_json(data)
        return
    from rich.table import Table

    console = make_console()
    table = Table(title="Expression library", title_justify="left", show_lines=False)
    table.add_column("function", no_wrap=True)
    table.add_column("what it is")
    table.add_column("source")
    for f in data["functions"]:
        doc = f["doc"] + (" (the built-in operation)" if f["builtin"] else "")
        source = f["source"] + (f"\n{f['link']}" if f["link"] else "")
        table.add_row(f["signature"], doc, source)
    console.print(table)
    ops = Table(title="Operations (also as methods: x.exp(), x.pow(2).sum())", title_justify="left")
    ops.add_column("operation", no_wrap=True)
    ops.add_column("what it is")
    ops.add_column("method", justify="center")
    for op in data["operations"]:
        ops.add_row(op["signature"], op["doc"], "yes" if op["method"] else "")
    console.print(ops)
    console.print("Operators: + - * / ** @, unary -, and > >= < <= inside where(...). Constants: pi, e.")
