"""`gradcli list`: the library and the operations as data, then as a table or JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..language.ops import OPS_LIST
from ..language.library import Library
from .contract import Line


@dataclass(frozen=True)
class Listing:
    """What `gradcli list` shows: the library's functions and the operations, as plain data."""

    functions: list[dict[str, Any]]
    operations: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {"functions": self.functions, "operations": self.operations}


def listing_data(library: Library) -> Listing:
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
    return Listing(functions, operations)


def listing_lines(data: Listing) -> list[Line]:
    from rich.table import Table

    table = Table(title="Expression library", title_justify="left", show_lines=False)
    table.add_column("function", no_wrap=True)
    table.add_column("what it is")
    # A link longer than the column folds onto the next line: cut to "…" it cannot be followed.
    table.add_column("source", overflow="fold")
    for f in data.functions:
        doc = f["doc"] + (" (the built-in operation)" if f["builtin"] else "")
        source = f["source"] + (f"\n{f['link']}" if f["link"] else "")
        table.add_row(f["signature"], doc, source)
    ops = Table(title="Operations (also as methods: x.exp(), x.pow(2).sum())", title_justify="left")
    ops.add_column("operation", overflow="fold")
    ops.add_column("what it is")
    ops.add_column("method", justify="center")
    for op in data.operations:
        ops.add_row(op["signature"], op["doc"], "yes" if op["method"] else "")
    return [Line(table), Line(ops),
            Line("Operators: + - * / ** @, unary -, and > >= < <= inside where(...). Constants: pi, e.")]
