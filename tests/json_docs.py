"""docs/json.md's key tables read as data, and a checker of produced documents against them.

The page is the single statement of the JSON contract; this module makes it executable, so a
key added to a document without its row (or a row whose key no document has) fails a test
that names the key and the table it belongs in.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable

DOCS = Path(__file__).resolve().parent.parent / "docs" / "json.md"

_TABLE = re.compile(
    r"<!-- json: (?P<name>[^>]+?) -->\n\| key \| type \| meaning \|\n\| --- \| --- \| --- \|\n(?P<rows>(?:\|.*\n)*)"
)
_CELL = re.compile(r"(?<!\\)\|")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")

NONFINITE = ("nan", "inf", "-inf")


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value)  # a float nan would not be valid JSON: it must be a string
    return isinstance(value, int) or value in NONFINITE


def _is_tensor(value: Any) -> bool:
    if isinstance(value, list):
        return all(_is_tensor(item) for item in value)
    return _is_number(value)


SCALARS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "tensor": _is_tensor,
    "any": lambda v: True,
}

Tables = dict[str, dict[str, tuple[str, ...]]]


def read_tables(text: str | None = None) -> Tables:
    """{table name: {row key: type alternatives}}, in the page's order."""
    text = DOCS.read_text(encoding="utf-8") if text is None else text
    tables: Tables = {}
    for match in _TABLE.finditer(text):
        rows: dict[str, tuple[str, ...]] = {}
        for line in match["rows"].splitlines():
            cells = [c.strip() for c in _CELL.split(line)[1:-1]]
            key, kind = cells[0].strip("`"), _LINK.sub(r"\1", cells[1])
            rows[key] = parse_type(kind)
        tables[match["name"]] = rows
    return tables


def parse_type(text: str) -> tuple[str, ...]:
    """'string or null' -> ('string', 'null'); 'list of X or Y' stays whole (X or Y are its items)."""
    if text.startswith("list of "):
        return (text,)
    return tuple(part.strip() for part in text.split(" or "))


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}[type(value)] + f" ({str(value)[:40]})"


class Checker:
    """Walks documents against the tables; collects problems and the rows that were used."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.used: set[tuple[str, str]] = set()
        self.problems: list[str] = []
        self._reported: set[tuple[str, str]] = set()  # one message per row, not one per list item

    def document(self, value: Any, table: str, origin: str) -> None:
        self._value(value, (table,), table, "", origin, "")

    def unused(self) -> list[str]:
        return [
            f"docs/json.md documents `{row}` in the table `{table}`, but no run produced it"
            for table, rows in self.tables.items() for row in rows if (table, row) not in self.used
        ]

    def _object(self, value: dict, table: str, prefix: str, origin: str, path: str) -> None:
        rows = self.tables[table]
        for key, item in value.items():
            row = prefix + key if prefix + key in rows else prefix + "*"
            if row not in rows:
                self._report(table, prefix + key, (
                    f"{origin}: the key `{path}{key}` is not in docs/json.md: add the row `{prefix}{key}` "
                    f"to the table `{table}`"
                ))
                continue
            self.used.add((table, row))
            self._value(item, rows[row], table, row, origin, path + key)

    def _value(self, value: Any, types: tuple[str, ...], table: str, row: str, origin: str, path: str) -> None:
        for kind in types:
            if kind.startswith("list of "):
                if isinstance(value, list):
                    items = parse_type(kind[len("list of "):])
                    for i, item in enumerate(value):
                        self._value(item, items, table, row, origin, f"{path}[{i}]")
                    return
            elif kind == "object" or kind in self.tables:
                if isinstance(value, dict):
                    if kind == "object":
                        self._object(value, table, row + ".", origin, path + ".")
                    else:
                        self._object(value, kind, "", origin, path + "." if path else "")
                    return
            elif kind not in SCALARS:
                self.problems.append(f"docs/json.md: the type `{kind}` of `{row}` in `{table}` is not a type")
                return
            elif SCALARS[kind](value):
                return
        self._report(table, row, (
            f"{origin}: `{path}` is {_describe(value)}, but docs/json.md says {' or '.join(types)} "
            f"(row `{row}` of the table `{table}`)"
        ))

    def _report(self, table: str, row: str, message: str) -> None:
        if (table, row) not in self._reported:
            self._reported.add((table, row))
            self.problems.append(message)
