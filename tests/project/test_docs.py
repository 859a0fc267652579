"""Documentation that cannot rot: every example in README.md, in docs/ and in `--help` runs.

Every page (tests/doc_pages.py says which, and how a page marks commands): each `gradcli ...`
line of a shell block is run through the CLI (in a scratch folder, so files it writes land
there) with the exit status its `# exit N` states (default 0); a command shown on several
pages, in a help text or as a console session runs once, and each of those tests asserts on
that one run. Each `$ gradcli ...` of a console block is run and its output compared with
the one the page shows. Python blocks are executed, and any `test_*` function they define is
called, as the user's pytest would. Help texts: each `gradcli ...` line in a command's help is
run the same way.
"""

from __future__ import annotations

import shlex
import shutil
from types import SimpleNamespace

import pytest
import typer.main

import doc_pages
from gradcli.cli import app
from shared_runs import shared_json_run, shown_as

# `--dot PATH` with one of these suffixes is drawn by Graphviz's `dot` program, which a fresh
# machine may lack (it is not a Python package, so `pip install '.[test]'` cannot bring it).
_PICTURES = (".svg", ".png", ".pdf")


def _page_commands() -> dict[tuple[str, int], list[str]]:
    """{(command, expected status): the pages showing it}, in the order the pages show them."""
    found: dict[tuple[str, int], list[str]] = {}
    for page in doc_pages.pages():
        for block in doc_pages.blocks(page, doc_pages.SHELL):
            for command in doc_pages.commands(block):
                found.setdefault(command, []).append(doc_pages.name(page))
    return found


PAGE_COMMANDS = _page_commands()
SESSIONS = [s for page in doc_pages.pages() for s in doc_pages.sessions(page)]
PYTHON_BLOCKS = [(doc_pages.name(page), block) for page in doc_pages.pages()
                 for block in doc_pages.blocks(page, {"python"})]


def _help_texts() -> list[tuple[str, str]]:
    group = typer.main.get_command(app)
    texts = [("gradcli", group.help or "")]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        texts.append((name, command.help or ""))
    return texts


HELP_COMMANDS = [(command, expected) for _, text in _help_texts() for command, expected in doc_pages.commands(text)]


def _needs_graphviz(args: list[str]) -> bool:
    """Whether the example asks `dot` for a picture (`--dot graph.svg`), not for DOT text."""
    for flag, value in zip(args, args[1:]):
        if flag == "--dot" and value.lower().endswith(_PICTURES):
            return True
    return any(a.startswith("--dot=") and a.lower().endswith(_PICTURES) for a in args)


#: Each distinct command's result, run once for this module (xdist's --dist loadfile keeps the
#: module on one worker): a command shown on a page, in a help text and as a console session is
#: one run, each test asserting on it what it asserts (the status, no traceback, the output).
_RESULTS: dict[str, object] = {}


def _result(command: str, tmp_path_factory):
    """The command run as a user would from the top of the checkout (doc_pages.run, at the
    pages' width), in a fresh folder where the files it writes land; once per command. One
    that another file runs with `--json PATH` is that run (tests/shared_runs.py)."""
    if command not in _RESULTS:
        shared = shown_as(shlex.split(command)[1:])
        if shared is not None:
            run = shared_json_run(shared, tmp_path_factory)
            _RESULTS[command] = SimpleNamespace(**{k: run[k] for k in ("exit_code", "stdout", "stderr", "output")})
        else:
            _RESULTS[command] = doc_pages.run(command, tmp_path_factory.mktemp("example"))
    return _RESULTS[command]


def _run(command: str, expected: int, tmp_path_factory) -> None:
    args = shlex.split(command)[1:]
    if _needs_graphviz(args) and shutil.which("dot") is None:
        pytest.skip("Graphviz's `dot` is not on PATH: this example draws a picture with it")
    result = _result(command, tmp_path_factory)
    assert result.exit_code == expected, (
        f"`{command}` exited {result.exit_code}, expected {expected}\n"
        f"stdout:\n{result.stdout[-2000:]}\nstderr:\n{result.stderr[-2000:]}"
    )
    assert "Traceback" not in result.stderr


def test_readme_has_an_example_of_every_command():
    readme = [c for block in doc_pages.blocks(doc_pages.README, doc_pages.SHELL) for c, _ in doc_pages.commands(block)]
    readme += [s.command for s in doc_pages.sessions(doc_pages.README)]
    shown = {command.split()[1] for command in readme}
    assert {"trace", "grads", "check", "check-function", "compare", "memory", "plot", "list", "demo", "watch", "diverge"} <= shown


def test_a_shortened_output_matches_only_in_order():
    output = "a\nb\nc\nd\n"
    assert doc_pages.matches("a\n...\nc\n...\n", output)
    assert doc_pages.matches("...\nd\n", output)
    assert not doc_pages.matches("...\nc\n...\nb\n...\n", output)
    assert not doc_pages.matches("a\nc\n", output)
    assert not doc_pages.matches("...\n", output)  # shows nothing


def test_every_page_is_found():
    # A folder the walk missed would leave its commands unrun without failing anything.
    names = {doc_pages.name(p) for p in doc_pages.pages()}
    assert {"README.md", "docs/getting-started.md", "docs/getting-started.zh.md", "docs/cli.md",
            "docs/commands/trace.md", "docs/recipes/nan.md"} <= names


@pytest.mark.parametrize(("command", "expected"), list(PAGE_COMMANDS), ids=[c for c, _ in PAGE_COMMANDS])
def test_page_example_runs(command, expected, tmp_path_factory):
    _run(command, expected, tmp_path_factory)


@pytest.mark.parametrize("session", SESSIONS, ids=[f"{s.page}: {s.command}" for s in SESSIONS])
def test_page_output_is_the_real_output(session, tmp_path_factory):
    result = _result(session.command, tmp_path_factory)
    assert result.exit_code == session.expected, f"{session.page}: `{session.command}` exited {result.exit_code}"
    assert doc_pages.matches(session.shown, result.output), (
        f"{session.page} shows another output for `{session.command}`: "
        "rerun `python tests/doc_pages.py --write` and read the diff")


def test_every_command_help_has_an_example():
    for name, text in _help_texts():
        assert doc_pages.commands(text), f"the help of `{name}` has no `gradcli ...` example"


@pytest.mark.parametrize(("command", "expected"), HELP_COMMANDS, ids=[c for c, _ in HELP_COMMANDS])
def test_help_example_runs(command, expected, tmp_path_factory):
    _run(command, expected, tmp_path_factory)


@pytest.mark.parametrize(("page", "block"), PYTHON_BLOCKS, ids=[f"{p}: {b.splitlines()[0][:40]}" for p, b in PYTHON_BLOCKS])
def test_page_python_block_runs(page, block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "doc_example"}
    exec(compile(block, page, "exec"), namespace)
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            value()


def test_the_cli_reference_is_generated_from_the_app():
    # The site's CLI reference is written by an mkdocs hook at build time; here, without mkdocs,
    # its text must name every command and every option typer builds.
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_reference", doc_pages.DOCS / "_hooks" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (doc_pages.DOCS / "reference" / "cli-reference.md").read_text(encoding="utf-8")
    assert module.MARKER in page
    text = module.on_page_markdown(page)
    assert module.MARKER not in text
    stack = [("gradcli", typer.main.get_command(app))]
    while stack:
        path, command = stack.pop()
        assert f"`{path}`" in text
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                assert all(opt in text for opt in param.opts), f"{path}: {param.opts}"
        stack.extend((f"{path} {name}", sub) for name, sub in getattr(command, "commands", {}).items())
