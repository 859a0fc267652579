"""The documentation's pages and what runs in them: README.md and every page under docs/.

Shell blocks (```sh, ```bash): each line starting with `gradcli ` is a command, run by
tests/project/test_docs.py; a trailing `# exit N` states its exit status (default 0).

Console blocks (```console) are sessions: each `$ gradcli ...` line is followed by the output
that command prints on a pipe (100 columns, no colour), up to the next `$ ` line or the end of
the block. The tests rerun each one and compare its output and exit status with the page, so a
shown output is always the code's own. A line `...` in a shown output stands for any lines
there (a long report, shortened); the rest must appear as shown, in order. After changing what
a command prints, rewrite the outputs that no longer match (in full: shorten them again by hand):

    python tests/doc_pages.py --write
"""

from __future__ import annotations

import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
WIDTH = "100"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_EXIT = re.compile(r"#\s*exit\s+(\d)\b.*$")
SHELL = {"sh", "bash"}


def pages() -> list[Path]:
    """README.md and every Markdown page of the site (docs/_hooks holds code, not pages)."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)]


def name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def blocks(page: Path, languages: set[str]) -> list[str]:
    return [body for lang, body in _BLOCK.findall(page.read_text(encoding="utf-8")) if lang in languages]


def command_of(line: str) -> tuple[str, int] | None:
    """(`gradcli ...` without its comment, expected exit status), or None for another line."""
    line = re.sub(r"^(Examples?:)?\s*(\$ )?", "", line.strip())
    if not line.startswith("gradcli "):
        return None
    match = _EXIT.search(line)
    return _EXIT.sub("", line).strip(), int(match.group(1)) if match else 0


def commands(text: str) -> list[tuple[str, int]]:
    return [c for c in map(command_of, text.splitlines()) if c is not None]


@dataclass(frozen=True)
class Session:
    """One `$ gradcli ...` of a console block and the output the page shows for it."""

    page: str
    command: str
    expected: int
    shown: str


def sessions(page: Path) -> list[Session]:
    found = []
    for body in blocks(page, {"console"}):
        for chunk in re.split(r"^(?=\$ )", body, flags=re.M):
            if not chunk.startswith("$ "):
                continue
            first, _, rest = chunk.partition("\n")
            parsed = command_of(first)
            if parsed is not None:
                found.append(Session(name(page), parsed[0], parsed[1], rest))
    return found


def tidy(text: str) -> str:
    """Output as a page holds it: no trailing spaces, no trailing blank lines."""
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def matches(shown: str, output: str) -> bool:
    """Whether `output` is what the page shows, `...` lines standing for any lines."""
    shown_lines, lines = tidy(shown).splitlines(), tidy(output).splitlines()
    if not set(shown_lines) - {"...", ""}:
        return False  # shows nothing: no output could be told from another
    if "..." not in shown_lines:
        return shown_lines == lines
    parts, part = [], []
    for line in shown_lines:
        if line == "...":
            parts.append(part)
            part = []
        else:
            part.append(line)
    parts.append(part)
    first, *middle, last = parts
    if lines[:len(first)] != first or (last and lines[len(lines) - len(last):] != last):
        return False
    at, end = len(first), len(lines) - len(last)
    for part in middle:
        for start in range(at, end - len(part) + 1):
            if lines[start:start + len(part)] == part:
                at = start + len(part)
                break
        else:
            return False
    return at <= end


def run(command: str, folder: Path):
    """Run `gradcli ...` as a user would from the top of the checkout, writing files into
    `folder`; returns click's Result."""
    import os

    from typer.testing import CliRunner

    from gradcli.cli import app

    link = folder / "examples"
    if not link.exists():
        link.symlink_to(ROOT / "examples")
    runner = CliRunner(env={"COLUMNS": WIDTH, "NO_COLOR": "1"})
    before = os.getcwd()
    os.chdir(folder)
    try:
        return runner.invoke(app, shlex.split(command)[1:], catch_exceptions=False)
    finally:
        os.chdir(before)


def write() -> None:
    """Rerun every console session and write its real output into its page."""
    with tempfile.TemporaryDirectory() as scratch:
        for page in pages():
            text = page.read_text(encoding="utf-8")
            if "```console" not in text:
                continue

            def rewrite(block: re.Match) -> str:
                if block.group(1) != "console":
                    return block.group(0)
                out = []
                for chunk in re.split(r"^(?=\$ )", block.group(2), flags=re.M):
                    first = chunk.partition("\n")[0]
                    if not chunk.startswith("$ ") or command_of(first) is None:
                        out.append(chunk)
                        continue
                    command, expected = command_of(first)
                    result = run(command, Path(scratch))
                    if result.exit_code != expected:
                        sys.exit(f"{name(page)}: `{command}` exited {result.exit_code}, the page says {expected}")
                    shown = chunk.partition("\n")[2]
                    if shown.strip() and matches(shown, result.output):
                        out.append(chunk)
                    else:
                        out.append(first + "\n" + tidy(result.output) + "\n")
                return "```console\n" + "".join(out) + "```"

            page.write_text(_BLOCK.sub(rewrite, text), encoding="utf-8")
            print("wrote", name(page))


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    sys.path.insert(0, str(ROOT))
    write()
