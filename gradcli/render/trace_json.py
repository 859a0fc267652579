"""`--json`: the one JSON writer. Every result's document is its `as_dict()` (outcome.py).

Two layouts, by result: a trace's and a grads report's document (often thousands of nodes or
parameters) are written one line per node, leaf, pass, flow step, parameter and module, so
large documents stay readable and diffable and the text is written by json's fast C encoder
(a pretty-printed 20,000-node document took 4x longer); the others are indented.

JSON has no NaN or infinity, and gradients that are nan or inf are exactly what a trace is
for, so non-finite numbers are written as the strings "nan", "inf" and "-inf" (the output
stays valid JSON for every parser; `float("nan")` reads them back in Python). The trace's
document itself is tracing/document.py's, the grads report's health/result.py's.
"""

from __future__ import annotations

import json
from json.encoder import c_make_encoder, encode_basestring
from typing import Any

import orjson

from .._quiet_gc import paused_gc
from ..tracing.document import trace_document  # noqa: F401  (tests read the document from here)
from .contract import Format
from .values import finite_safe


def trace_json(result: Any) -> str:
    """The trace as JSON text: valid JSON (non-finite numbers become strings), one line per
    node, pass, leaf and flow step."""
    with paused_gc():
        return lines_json(result.as_dict(), arrays=_TRACE_ARRAYS)


#: The trace document's lists whose items carry values and gradients (docs/json.md).
_TRACE_ARRAYS = frozenset({"leaves", "passes"})


def lines_json(document: dict[str, Any], arrays: frozenset[str] = frozenset()) -> str:
    """A document with one line per item of its lists of objects (no final newline); in the
    items of the `arrays` lists, a list met twice is encoded once (below)."""
    written: dict[int, str] = {}
    return "{\n" + ",\n".join(
        f"  {_dumps(key)}: {_member(value, written if key in arrays else None)}" for key, value in document.items()
    ) + "\n}"


def _member(value: Any, written: dict[int, str] | None) -> str:
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        items = (_dumps(item) for item in value) if written is None else (_object(item, written) for item in value)
        return "[\n    " + ",\n    ".join(items) + "\n  ]"
    return _dumps(value)


_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False)
# The C encoder JSONEncoder.encode makes anew on every call, made once (20,000 node lines:
# 0.125 -> 0.093 s). No circular-reference markers: a document is acyclic plain data, and a
# marker left behind by a call that raised (a nan) would refuse a later object at that address.
_ONE_LINE = (
    c_make_encoder(None, _ENCODER.default, encode_basestring, None, ": ", ", ", False, False, False)
    if c_make_encoder is not None else None
)


def _dumps(value: Any) -> str:
    try:  # nearly every value is finite: let the C encoder find the rare nan or inf
        return "".join(_ONE_LINE(value, 0)) if _ONE_LINE is not None else _ENCODER.encode(value)
    except (ValueError, TypeError):  # TypeError: a numpy or torch value (finite_safe converts it)
        return _ENCODER.encode(finite_safe(value))


# -- values written once -----------------------------------------------------------------------
# A model's values and gradients are most of its document (bench/model.py's DeepMLP: 500,000
# numbers, 10.6 of 13 MB), and after the last pass each weight's gradient is in it twice: the
# leaf's .grad and the pass's gradient, which the document makes one list (tracing/document.py).
# The items of the `arrays` lists are written key by key, and a list met again is not encoded
# again (DeepMLP: the passes' 3.5 MB, 0.09 s). The lists themselves are written by orjson, whose
# floats are ~15x faster than json's (float.__repr__ per number): DeepMLP's 0.41 s became 0.03 s.


def _object(item: dict[str, Any], written: dict[int, str]) -> str:
    """An object as _dumps writes it; `written`: id(list) -> its text, for this document."""
    return "{" + ", ".join(f"{_key(key)}: {_part(value, written)}" for key, value in item.items()) + "}"


def _part(value: Any, written: dict[int, str]) -> str:
    if type(value) is list:
        text = written.get(id(value))
        if text is None:  # the document holds every list while it is written: ids stay unique
            text = written[id(value)] = _numbers(value)
        return text
    if type(value) is dict and value and type(next(iter(value.values()))) is list:
        return _object(value, written)  # a pass's gradients by name
    return _dumps(value)


def _numbers(values: list[Any]) -> str:
    """A list of a tensor's values as _dumps writes it (", " between items, the same numbers).

    orjson writes nan and inf as null (and a tensor's values hold no None), so a list whose
    text has a null is written again by _dumps, which spells them "nan" and "inf"; orjson also
    refuses what json takes otherwise (an integer past 64 bits)."""
    try:
        text = orjson.dumps(values)
    except orjson.JSONEncodeError:
        return _dumps(values)
    if b"null" in text:
        return _dumps(values)
    return text.replace(b",", b", ").decode()


def _key(key: Any) -> str:
    return encode_basestring(key) if type(key) is str else _dumps({key: 0})[1:-4]


class JsonFormat(Format):
    """`--json`: one JSON document per result, for programs (see each result's as_dict)."""

    name = "json"

    def _render_TraceResult(self, result: Any) -> str:
        return trace_json(result) + "\n"

    def _render_Reported(self, result: Any) -> str:
        """Any result of outcome.py's protocol: its document, indented (a new command's result
        needs nothing here unless its document is large enough to want the one-line layout)."""
        return document_json(result.as_dict())

    _render_Listing = _render_Reported

    def _render_GradsResult(self, result: Any) -> str:
        return grads_json(result) + "\n"


def grads_json(result: Any) -> str:
    """The grads report as JSON text: one line per parameter and per module."""
    return lines_json(finite_safe(result.as_dict()))


def document_json(document: Any) -> str:
    """A document as indented JSON text; a non-finite number is written as a string."""
    return json.dumps(finite_safe(document), indent=2, allow_nan=False, default=str) + "\n"
