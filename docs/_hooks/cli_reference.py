"""The reference pages generated from the code each time the site is built (an mkdocs hook).

docs/reference/cli-reference.md holds only a marker; this hook (mkdocs.yml `hooks:`) replaces
it with every command's usage line, help text and options as typer builds them, by walking
the click command tree, so the page cannot drift from the code. docs/cli.md is the contract
written by hand (what each option means, and why); this page is what `--help` says.
docs/reference/python-api.md gets the public functions' signatures and docstrings the same way.
"""

from __future__ import annotations

MARKER = "<!-- generated: cli-reference -->"
API_MARKER = "<!-- generated: python-api -->"
# The public functions (gradcli.NAME) and the function each wraps, whose signature holds the
# real keywords (the wrappers take **options and return the result that renders itself).
API = {
    "trace": "gradcli.tracing.trace",
    "grads": "gradcli.api",
    "check": "gradcli.verify.expression.check",
    "check_function": "gradcli.verify.function.check",
    "compare": "gradcli.api",
    "memory": "gradcli.api",
    "watch": "gradcli.watcher.api",
}


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (no row break, no emphasis, no HTML)."""
    for raw, escaped in (("\\", "\\\\"), ("|", "\\|"), ("*", "\\*"), ("_", "\\_"), ("<", "&lt;"), ("`", "\\`")):
        text = text.replace(raw, escaped)
    return " ".join(text.split())


def _commands(command, ctx, path):
    """(path, command, context) for the command and every command below it, depth first."""
    import typer._click as click

    yield path, command, ctx
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, click.Context(sub, info_name=name, parent=ctx), f"{path} {name}")


def _section(path: str, command, ctx) -> str:
    level = "#" * min(2 + path.count(" ") - 1, 4) if " " in path else "##"
    lines = [f"{level} `{path}`", "", "```text", command.get_usage(ctx), "```", ""]
    if command.help:
        lines += ["```text", command.help.replace("\b\n", "").strip("\n"), "```", ""]
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            name = param.metavar or param.name.upper()
            rows.append((f"`{name}`", "required" if param.required else "optional", param.help or ""))
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        rows.append((f"`{names}`", "option", help_text))
    if rows:
        lines += ["| argument or option | kind | help |", "| --- | --- | --- |"]
        lines += [f"| {name} | {kind} | {_cell(text)} |" for name, kind, text in rows]
        lines.append("")
    subs = getattr(command, "commands", {})
    if subs:
        lines += ["Commands: " + ", ".join(f"`{path} {name}`" for name in subs), ""]
    return "\n".join(lines)


def reference() -> str:
    """Markdown for every command of the gradcli app, as typer builds it."""
    import typer._click as click
    import typer.main

    from gradcli.cli import app

    group = typer.main.get_command(app)
    root = click.Context(group, info_name="gradcli")
    return "\n".join(_section(path, command, ctx) for path, command, ctx in _commands(group, root, "gradcli"))


def api_reference() -> str:
    """Markdown for every public function: its signature and its docstring."""
    import importlib
    import inspect

    import gradcli

    lines = []
    for name, module in API.items():
        function = getattr(importlib.import_module(module), name)
        signature = inspect.signature(function).replace(return_annotation=inspect.Signature.empty)
        result = inspect.signature(getattr(gradcli, name)).return_annotation
        lines += [f"### `gradcli.{name}`", "", "```python", f"gradcli.{name}{signature} -> {result}", "```", ""]
        lines += ["```text", inspect.getdoc(function) or "", "```", ""]
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, reference())
    if API_MARKER in markdown:
        markdown = markdown.replace(API_MARKER, api_reference())
    return markdown
