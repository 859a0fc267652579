"""docs/ARCHITECTURE.md's tables cannot rot: every command gradcli has is in the table of
commands, and every folder, cli file and renderer it names exists, each renderer reached by the
text format's method for the result named beside it; the table of floors names every floor of
tests/project/test_layers.py, module for module, low to high."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from gradcli.cli import app
from gradcli.render.text import TextFormat
from paths import ROOT

PACKAGE = ROOT / "gradcli"
DOC = ROOT / "docs" / "ARCHITECTURE.md"


def rows(heading: str = "## Where each command lives") -> list[list[str]]:
    section = DOC.read_text(encoding="utf-8").split(heading)[1].split("\n## ")[0]
    table = [line for line in section.splitlines() if line.startswith("| ")][2:]  # past the header and rule
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table]


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_every_command_is_in_the_table():
    commands = set(typer.main.get_command(app).commands)
    named = {name.split()[0] for row in rows() for name in _names(row[0])}
    assert named == commands


def test_every_folder_cli_file_and_renderer_in_the_table_exists():
    missing = [path for row in rows() for cell in row[1:4] for path in _names(cell) if not (PACKAGE / path).exists()]
    assert missing == []


def test_each_result_in_the_table_is_rendered_through_the_renderer_named_beside_it():
    import inspect

    for row in rows():
        renderers = {Path(p).stem for p in _names(row[3])}
        for result in _names(row[4]):
            method = getattr(TextFormat, f"_render_{result}")
            source = inspect.getsource(method)
            assert any(re.search(rf"from \.(training\.)?{stem} import", source) for stem in renderers), (result, renderers)


def floor_rows() -> list[list[str]]:
    """Each row of the floors table as the dotted modules it names (`verify/__init__.py` and
    `gradcli/__init__.py` are their packages); words in parentheses are not names."""
    named = []
    for row in rows("## The floors"):
        cell = re.sub(r"\([^)]*\)", "", row[1])
        modules = []
        for name in _names(cell):
            dotted = name.removesuffix("/").removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            modules.append(dotted if dotted == "gradcli" or dotted.startswith("gradcli.") else f"gradcli.{dotted}")
        named.append(modules)
    return named


def test_the_floors_table_names_every_floor_in_order():
    from test_layers import FLOORS, floor_of

    table = floor_rows()
    assert sorted(m for row in table for m in row) == sorted(p for floor in FLOORS for p in floor)
    levels = [sorted({floor_of(m) for m in row}) for row in table]
    flat = [level for row in levels for level in row]
    assert flat == list(range(len(FLOORS))), levels  # every floor once, low to high
