"""What a check hands back about one step: a finding not yet placed in the result."""

from __future__ import annotations

from typing import Any, NamedTuple

Site = tuple[str, int]  # (file, line) in the user's code


class Found(NamedTuple):
    kind: str  # kinds.py
    parameters: list[str]  # as named_parameters() names them
    detail: dict[str, Any]  # the numbers behind it, from torch
    at: int | None = None  # the step it is reported at (None: the step checked)
    modules: list[str] | None = None  # as named_modules() names them (None: the parameters' modules)
    site: Site | None = None  # the user's line that did it
