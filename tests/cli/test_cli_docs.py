"""docs/cli.md lists exactly the arguments and options each command has.

The options tables are compared with the commands typer builds, so an option added to a
command without its row (or a row left behind by a removed option) fails here, by name.
"""

from __future__ import annotations

import re

import pytest
import typer.main

from gradcli.cli import app
from paths import ROOT

DOCS = ROOT / "docs" / "cli.md"
_TABLE = re.compile(r"<!-- options: (?P<command>[^>]+?) -->\n\|.*\n\| --- \| --- \|\n(?P<rows>(?:\|.*\n)*)")


def documented() -> dict[str, set[str]]:
    """{command: the options and arguments its table lists}: `--var`, `-v`, `EXPR` ..."""
    tables = {}
    for match in _TABLE.finditer(DOCS.read_text(encoding="utf-8")):
        names = set()
        for line in match["rows"].splitlines():
            first = line.split(" | ")[0].lstrip("| ")
            names.update(code.split(" ")[0] for code in re.findall(r"`([^`]+)`", first))
        tables[match["command"]] = names
    return tables


def actual() -> dict[str, set[str]]:
    """{command: its options and arguments}; a sub-app's commands are `demo swish` ..., and a
    command without any (`demo graph`, the `demo` group itself) needs no table."""
    commands = {}
    stack = [("", typer.main.get_command(app))]
    while stack:
        prefix, group = stack.pop()
        for name, command in group.commands.items():
            full = f"{prefix}{name}"
            if hasattr(command, "commands"):
                stack.append((full + " ", command))
            names = set()
            for param in command.params:
                if param.param_type_name == "argument":
                    names.add(param.metavar or param.name.upper())
                else:
                    names.update(param.opts)
            if names:
                commands[full] = names
    return commands


def test_every_command_has_an_options_table():
    assert set(documented()) == set(actual())


@pytest.mark.parametrize("command", sorted(actual()))
def test_the_table_lists_exactly_the_commands_options(command):
    written, real = documented()[command], actual()[command]
    assert not real - written, f"docs/cli.md: `gradcli {command}` has {sorted(real - written)}, not in its table"
    assert not written - real, f"docs/cli.md: `gradcli {command}`'s table lists {sorted(written - real)}, which it lacks"


def test_the_demo_section_names_every_demo():
    # docs/cli.md named swish, graph, backward and grad; chain-rule came later and was missing.
    demo = typer.main.get_command(app).commands["demo"]
    section = DOCS.read_text(encoding="utf-8").split("## `gradcli demo [NAME]`")[1].split("\n## ")[0]
    named = set(re.findall(r"`(\w[\w-]*)`", section.split("runs one (")[1].split(")")[0]))
    assert named == set(demo.commands), f"docs/cli.md's demo section names {sorted(named)}"
