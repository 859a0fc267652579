"""Documentation that cannot rot: every example in README.md and in `--help` runs.

README shell blocks: each line starting with `gradcli ` is run through the CLI (in a scratch
folder, so files it writes land there); a trailing `# exit N` states the expected status
(default 0). README python blocks are executed, and any `test_*` function they define is
called, as the user's pytest would. Help texts: each `gradcli ...` line in a command's help is
run the same way.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import typer.main

from gradcli.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
_EXIT = re.compile(r"#\s*exit\s+(\d)\b.*$")
# `--dot PATH` with one of these suffixes is drawn by Graphviz's `dot` program, which a fresh
# machine may lack (it is not a Python package, so `pip install '.[test]'` cannot bring it).
_PICTURES = (".svg", ".png", ".pdf")


def _blocks(language: set[str]) -> list[str]:
    return [body for lang, body in _BLOCK.findall(README.read_text(encoding="utf-8")) if lang in language]


def _commands(text: str) -> list[tuple[str, int]]:
    commands = []
    for line in text.splitlines():
        line = re.sub(r"^(Examples?:)?\s*(\$ )?", "", line.strip())
        if not line.startswith("gradcli "):
            continue
        match = _EXIT.search(line)
        expected = int(match.group(1)) if match else 0
        command = _EXIT.sub("", line).strip()
        commands.append((command, expected))
    return commands


README_COMMANDS = [c for block in _blocks({"sh", "console", "bash"}) for c in _commands(block)]


def _help_texts() -> list[tuple[str, str]]:
    group = typer.main.get_command(app)
    texts = [("gradcli", group.help or "")]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        texts.append((name, command.help or ""))
    return texts


HELP_COMMANDS = [(command, expected) for _, text in _help_texts() for command, expected in _commands(text)]


def _needs_graphviz(args: list[str]) -> bool:
    """Whether the example asks `dot` for a picture (`--dot graph.svg`), not for DOT text."""
    for flag, value in zip(args, args[1:]):
        if flag == "--dot" and value.lower().endswith(_PICTURES):
            return True
    return any(a.startswith("--dot=") and a.lower().endswith(_PICTURES) for a in args)


def _run(cli, command: str, expected: int, folder: Path, monkeypatch) -> None:
    args = shlex.split(command)[1:]
    if _needs_graphviz(args) and shutil.which("dot") is None:
        pytest.skip("Graphviz's `dot` is not on PATH: this example draws a picture with it")
    # Examples are written from the top of the checkout; files they write land in `folder`.
    (folder / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(folder)
    result = cli(*args)
    assert result.exit_code == expected, (
        f"`{command}` exited {result.exit_code}, expected {expected}\n"
        f"stdout:\n{result.stdout[-2000:]}\nstderr:\n{result.stderr[-2000:]}"
    )
    assert "Traceback" not in result.stderr


def test_readme_has_examples():
    assert len(README_COMMANDS) >= 10


@pytest.mark.parametrize(("command", "expected"), README_COMMANDS, ids=[c for c, _ in README_COMMANDS])
def test_readme_example_runs(cli, command, expected, tmp_path, monkeypatch):
    _run(cli, command, expected, tmp_path, monkeypatch)


def test_every_command_help_has_an_example():
    for name, text in _help_texts():
        assert _commands(text), f"the help of `{name}` has no `gradcli ...` example"


@pytest.mark.parametrize(("command", "expected"), HELP_COMMANDS, ids=[c for c, _ in HELP_COMMANDS])
def test_help_example_runs(cli, command, expected, tmp_path, monkeypatch):
    _run(cli, command, expected, tmp_path, monkeypatch)


@pytest.mark.parametrize("block", _blocks({"python"}), ids=lambda b: b.splitlines()[0][:40])
def test_readme_python_block_runs(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(block, str(README), "exec"), namespace)
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            value()
